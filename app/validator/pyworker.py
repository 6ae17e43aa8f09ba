"""What Arbiter does to the Python worker process Spark runs its tasks in.

PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task (``pyspark/daemon.py``). With
Arbiter's imports in the worker (pydantic's schemas, pyarrow, the domain) that one call traversed every
object of the process, twenty-odd milliseconds per task: py-spy with ``--gil`` put 90 % of a worker's CPU
there at 100 commands/s (docs/benchmarks.md). ``gc.freeze()`` moves what exists at that moment (the
imported modules and their objects, which live as long as the process) into the permanent generation, where
collections no longer look; what a task allocates is still collected.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_imports_once() -> None:
    """Freeze the objects alive now, once per process (call it after a task, when every import has happened)."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()  # once: what is garbage now is not frozen with the rest
        gc.freeze()
