"""``python -m app.validator`` / ``spark-submit app/validator/__main__.py``: the ``arbiter validator`` entry point."""

from __future__ import annotations

import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main(["validator", *sys.argv[1:]]))
