"""The live status page's figures: what the pipeline is doing now, collected for the API to serve at ``/``.

Holds: ``collector`` (broker offsets, the validator's progress and state, the supervisor's components),
``history`` (the charts' series), ``hotkeys`` (the hottest objects), ``static/`` (the page). The route that
serves it is ``app.api.routes.status``. May import the wiring at the top of ``app``, ``app.validator``'s
progress and backends, and ``app.run.restart``; never ``app.api``.
"""
