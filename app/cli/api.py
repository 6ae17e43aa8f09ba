"""``arbiter api`` serves the Command API with uvicorn; ``arbiter token <principal>`` prints a development JWT.

Tokens are printed by ``arbiter token`` (and by ``arbiter run``'s development summary on loopback), never by
``arbiter api``: its output is a log (``var/logs/api.log`` under ``arbiter run``) and a token there is a credential
anyone who reads the log can use.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from app.settings import MAX_TOKEN_TTL_S, Settings, get_settings

# Longer than clients keep an idle connection (httpx and most pools: 5 s, uvicorn's own default too): with equal
# timeouts the server closed a connection just as a client sent on it, and the request failed as "connection
# closed" (16 of 10,000 at 500 req/s in bench.pipeline, docs/benchmarks.md fifth pass).
KEEP_ALIVE_S = 65


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("api", help="serve the Command API (default 127.0.0.1:8000)")
    p.add_argument("--host", help="bind address (default ARBITER_API_HOST)")
    p.add_argument("--port", type=int, help="port (default ARBITER_API_PORT)")
    p.add_argument("--workers", type=int, help="uvicorn worker processes (default ARBITER_API_WORKERS)")
    p.set_defaults(handler=_api)
    t = sub.add_parser("token", help="print a JWT for a principal from Arbiter's development issuer "
                       "(key pair in <var_dir>/identity)")
    t.add_argument("principal")
    t.add_argument("--ttl", type=_ttl, help="lifetime in seconds, 1 to MAX_TOKEN_TTL_S "
                   f"({MAX_TOKEN_TTL_S}, 7 days; default ARBITER_TOKEN_TTL_S, 8 hours)")
    t.add_argument("--scope", action="append", help="a scope to grant, repeatable (default: arbiter:read, "
                   "arbiter:write, arbiter:share; arbiter:operate for the status page; arbiter:metrics alone for "
                   "a Prometheus scraper)")
    t.add_argument("--group", action="append", default=[], help="a group the principal is in, repeatable")
    t.add_argument("--new-key", action="store_true", help="first add a key pair that signs from now on (the "
                   "older ones stay valid until their files are removed)")
    t.set_defaults(handler=_token)


def _ttl(text: str) -> int:
    """Parse ``--ttl``: whole seconds from 1 to ``MAX_TOKEN_TTL_S`` (the README's 7 days), else a usage error."""
    try:
        seconds = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from e
    if not 1 <= seconds <= MAX_TOKEN_TTL_S:
        raise argparse.ArgumentTypeError(f"{seconds} s is outside 1..{MAX_TOKEN_TTL_S} (MAX_TOKEN_TTL_S, 7 days)")
    return seconds


def _token(args: argparse.Namespace) -> int:
    from app.api.auth import SCOPES
    from app.api.identity import dev_token, local_issuer

    s = get_settings()
    unknown = set(args.scope or ()) - SCOPES
    if unknown:
        raise SystemExit(f"unknown scopes {sorted(unknown)}; known: {sorted(SCOPES)}")
    if args.new_key:
        local_issuer(s).new_key()
    scopes = tuple(args.scope) if args.scope else None
    print(dev_token(s, args.principal, scopes, args.ttl, tuple(args.group)))
    return 0


def multiprocess_metrics_dir(s: Settings) -> Path:
    """A fresh, empty ``<var_dir>/api-metrics/<pid>`` for the workers' Prometheus files: one per start, so no
    figure of an earlier run is summed into this one's ``/metrics``."""
    path = s.path(s.var_dir) / "api-metrics" / str(os.getpid())
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _api(args: argparse.Namespace) -> int:
    import uvicorn

    from app.api.main import create_app
    from app.api.secret_policy import require_usable_secret

    s = get_settings()
    host, port = args.host or s.api_host, args.port or s.api_port
    require_usable_secret(s, host)  # before anything starts, with the address actually bound
    s = s.model_copy(update={"api_host": host, "api_port": port})
    print(f"serving the Command API on http://{host}:{port} (OpenAPI at /docs, /openapi.json; "
          "tokens: `arbiter token <principal>`)", flush=True)
    workers = args.workers or s.api_workers
    if workers > 1:
        # the workers import app.api.asgi, which reads the environment: give them the address they serve on
        os.environ["ARBITER_API_HOST"], os.environ["ARBITER_API_PORT"] = host, str(port)
        metrics_dir = multiprocess_metrics_dir(s)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)  # before the workers start (they are spawned)
        try:
            uvicorn.run("app.api.asgi:app", host=host, port=port, workers=workers, log_level="warning",
                        timeout_keep_alive=KEEP_ALIVE_S)
        finally:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    else:
        uvicorn.run(create_app(s), host=host, port=port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S)
    return 0
