"""``arbiter api`` serves the Command API with uvicorn; ``arbiter token <principal>`` prints a bearer token."""

from __future__ import annotations

import argparse

from app.settings import PLACEHOLDER_SECRET, get_settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("api", help="serve the Command API (default 127.0.0.1:8000)")
    p.add_argument("--host", help="bind address (default ARBITER_API_HOST)")
    p.add_argument("--port", type=int, help="port (default ARBITER_API_PORT)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.set_defaults(handler=_api)
    t = sub.add_parser("token", help="print a bearer token for a principal, signed with ARBITER_AUTH_SECRET")
    t.add_argument("principal")
    t.add_argument("--ttl", type=int, help="lifetime in seconds (default ARBITER_TOKEN_TTL_S)")
    t.set_defaults(handler=_token)


def _token(args: argparse.Namespace) -> int:
    from app.api.auth import issue_token

    s = get_settings()
    print(issue_token(s.auth_secret.get_secret_value(), args.principal, args.ttl or s.token_ttl_s))
    return 0


def _api(args: argparse.Namespace) -> int:
    import uvicorn

    from app.api.auth import issue_token
    from app.api.main import create_app

    s = get_settings()
    host, port = args.host or s.api_host, args.port or s.api_port
    if s.environment == "development":
        token = issue_token(s.auth_secret.get_secret_value(), "dev", s.token_ttl_s)
        note = " (signed with the development placeholder secret)" if \
            s.auth_secret.get_secret_value() == PLACEHOLDER_SECRET else ""
        print(f"development token for principal 'dev'{note}:\n  Authorization: Bearer {token}", flush=True)
    print(f"serving the Command API on http://{host}:{port} (OpenAPI at /docs, /openapi.json)", flush=True)
    if args.workers > 1:
        uvicorn.run("app.api.asgi:app", host=host, port=port, workers=args.workers, log_level="warning")
    else:
        uvicorn.run(create_app(s), host=host, port=port, log_level="warning")
    return 0
