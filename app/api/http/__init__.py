"""ASGI and request plumbing shared by the routes: body limits and JSON bodies, CORS, and the gate that
admits the change feed by ticket.

Imports app.api.callers, app.api.deps and app.api.problems.
"""
