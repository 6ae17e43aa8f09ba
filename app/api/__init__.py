"""The Command API: HTTP onto the keyed commands topic, synchronous outcomes and the query side.

Holds: ``main`` (the application), ``routes/`` (one module per resource, the status page's too), ``deps`` (the
dependencies routes share), ``auth``, ``tokens``, ``jwks``, ``identity`` and ``local_issuer`` (who calls: JWTs,
the issuers' keys, scopes, groups, the development issuer), ``json_body``, ``body_limit``, ``quota``, ``models``
and ``problems`` (the request edge: who, what body, how often, which errors), ``producer``, ``submit``, ``outcomes``, ``memo`` and
``summary`` (onto the topic and back), ``read_model`` (reads) and ``metrics``. May import the wiring at the top of ``app``,
``app.status``, ``commands`` and ``schemas``; nothing below ``app`` imports it.
"""
