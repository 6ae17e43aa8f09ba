"""Prometheus plumbing shared by the processes that are not the API: one registry served on its own port.

Holds: ``server`` (serve a process's collectors over HTTP: the validator's and each projection's ``/metrics``),
``projections`` (the projections' collector, read from their runners). May import the wiring at the top of
``app`` and ``projections``; the API keeps its own metrics in ``app.api.telemetry.metrics``.
"""
