"""Re-decide the archived history and compare it with what was written (``arbiter verify replay``), or with a
candidate rules document switched in (``arbiter rules what-if``). It may import ``app.validator``, ``app.archive``,
``app.rules``, ``app.rescale`` (the generations of the commands topic, and what a record written to a closed one
gives), ``commands`` and ``schemas``; the decisions come from ``app.validator.fold`` only."""
