"""The write path: a request becomes a signed command record on the commands topic (submit, the fast
writes, the producer), the write quota, the outcome cache, what it remembers of a decision, and the
Server-Timing of a write.

Imports app.api.callers, app.api.http, app.api.reads (positions), app.api.telemetry and the top's
deps, models and problems; nothing below imports it but app.api.deps and the routes.
"""
