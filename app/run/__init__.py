"""Running the pipeline as processes: the supervisor of ``arbiter run``, its restart policy, pidfiles, the scenario.

Holds: ``supervisor`` (child processes, their status and stop), ``restart`` (backoff and crash-loop limits),
``pidfile`` (which process owns a pid, safe against reuse), ``scenario`` (the demo commands ``./dev run`` sends).
May import the wiring at the top of ``app``, ``app.api.callers.auth`` (to sign the scenario's token), ``commands`` and
``schemas``; the API, validator and projections never import it, apart from ``pidfile``.
"""
