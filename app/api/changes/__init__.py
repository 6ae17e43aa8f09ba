"""The change feed (``GET /changes``, ``GET /objects/{id}/changes``): Server-Sent Events of the events topic.

``cursor`` (the SSE id: next offset per partition), ``roles`` (who may read an object at each event, folded from
its events and seeded from the audit trail), ``reader`` (reading a range of the events topic for one catch-up),
``fanout`` (one consumer per API process feeding every live subscriber), ``stream`` (one subscriber's events:
catch-up, then live). May import ``commands``, ``schemas``, ``projections`` and ``app.api``'s top modules; never
the routes.
"""
