"""``python -m app.cli``: the same as the ``arbiter`` console script."""

import sys

from app.cli import main

sys.exit(main())
