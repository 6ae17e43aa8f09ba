"""The Command API: HTTP onto the keyed commands topic, synchronous outcomes and the query side.

Its top holds what every room uses: ``main`` (the application) and ``asgi`` (its worker entry), ``deps`` (the
dependencies routes share), ``models`` and ``problems`` (request/response models and the one error mapping), and
``rules`` (the newest rules document the API has seen, for ``GET /rules`` and the advisory pre-check). The rooms:

- ``routes/``    one module per resource (objects, commands, changes, tickets, rules, identity, ops, status, ...);
- ``callers/``   who calls: tokens, trusted issuers and their keys, the development issuer, change-feed tickets;
- ``writes/``    a request onto the commands topic and its outcome back: submit, fast writes, producer, quota,
                 outcome cache, Server-Timing;
- ``reads/``     the read model, history and list pages, positions, cursors, the JSON rule of documents served;
- ``changes/``   the change feed (SSE): fan-out, catch-up, ids bound to their caller, roles now;
- ``http/``      ASGI plumbing: body limits and JSON bodies, CORS, the ticket gate;
- ``telemetry/`` Prometheus metrics and traces.

May import the wiring at the top of ``app``, ``app.status``, ``app.rules``, ``commands`` and ``schemas``; nothing below
``app`` imports it. A test (``tests/unit/test_api_rooms.py``) holds the rooms free of import circles.
"""
