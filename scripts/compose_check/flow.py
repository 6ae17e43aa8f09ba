"""The README's Docker section, followed literally against the project's docker-compose.yml (run by run.sh).

First `up` on empty volumes with only ARBITER_AUTH_SECRET set; every component running and healthy; a token from
`docker compose exec api arbiter token alice`; a write, a read at its position, an If-Match update, a stale one,
history, the status figures with an operator token; `down`, `up` again: the earlier document, its history and
its audited outcome still there, a new write decided, nothing restarted; `down -v` whatever happened. Standard
library only, so it runs with any Python 3.11. Exits non-zero with the reason and the containers' last log lines.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Every component a user expects running in the demo, and the ones whose healthcheck must pass.
RUNNING = ("kafka", "validator", "archive", "project-db", "project-audit", "project-log", "api")
HEALTHY = ("kafka", "validator", "archive", "api")
#: How long a start may take: Spark's first start in the validator's container took over 6 min on the 2-core machine
#: under a load average of 78 (other work); a few seconds' worth of minutes when it is idle.
START_S = 900
#: Variables of the caller's shell that would change what is checked (the README asks for the secret alone).
DROPPED_PREFIXES = ("ARBITER_", "GRAFANA_", "COMPOSE_", "VALIDATOR_SPARK_MASTER", "METRICS_PRINCIPAL", "API_HOST_PORT")


class CheckFailed(Exception):
    """A step of the README did not do what the README says."""


def log(msg: str) -> None:
    print(f"compose-check: {msg}", file=sys.stderr, flush=True)


class Compose:
    """`docker-compose -p <unique project>` in the repository, with a clean environment."""

    def __init__(self, docker: str, compose: str, port: int) -> None:
        self.project = f"arbiter-check-{os.getpid()}-{secrets.token_hex(3)}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_PREFIXES)}
        env["PATH"] = f"{Path(docker).parent}:{env.get('PATH', '/usr/bin:/bin')}"  # Debian's docker for builds
        env["ARBITER_AUTH_SECRET"] = secrets.token_urlsafe(48)
        env["API_HOST_PORT"] = str(port)  # the only deviation from a user's `up`: port 8000 may be taken here
        self.env = env
        self.docker = docker
        self.compose = compose

    def run(self, *args: str, timeout: float = 1800, check: bool = True,
            quiet: bool = False) -> subprocess.CompletedProcess[str]:
        cmd = [self.compose, "-p", self.project, *args]
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=timeout,  # noqa: S603
                              check=False)
        if not quiet:
            log(f"$ {' '.join(cmd)}  ({time.monotonic() - started:.0f} s, exit {proc.returncode})")
        if check and proc.returncode != 0:
            raise CheckFailed(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        return proc

    def states(self) -> dict[str, tuple[str, str, int]]:
        """Return (status, health or "", restart count) of each service's container, from one `docker inspect`."""
        ids = self.run("ps", "-a", "-q", quiet=True).stdout.split()
        if not ids:
            return {}
        fmt = ('{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} '
               '{{if .State.Health}}{{.State.Health.Status}}{{else}}-{{end}} {{.RestartCount}}')
        out = subprocess.run([self.docker, "inspect", "-f", fmt, "--", *ids], env=self.env,  # noqa: S603
                             capture_output=True, text=True, check=True).stdout
        states = {}
        for line in out.splitlines():
            service, status, health, restarts = line.split()
            states[service] = (status, "" if health == "-" else health, int(restarts))
        return states

    def logs(self) -> str:
        return self.run("logs", "--no-color", "--tail", "40", check=False).stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Api:
    """The API as a user's HTTP client sees it, on the published port."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method: str, path: str, token: str | None = None, body: Any = None,  # noqa: ANN401
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
        """Send a request; return its status, its headers (names in lower case) and its decoded JSON body."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310 - our own loopback URL
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/merge-patch+json" if method == "PATCH" else "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
                status, hdrs, raw = resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
        except urllib.error.HTTPError as e:
            status, hdrs, raw = e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = raw.decode(errors="replace")
        return status, hdrs, payload

    def ready(self, timeout_s: float) -> None:
        """Wait for `/healthz` to answer 200 (the README's readiness check)."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                status, _, last = self.call("GET", "/healthz")
                if status == 200:
                    return
            except OSError as e:
                last = e
            time.sleep(2)
        raise CheckFailed(f"/healthz did not answer 200 within {timeout_s:.0f} s: {last}")

    def decided(self, method: str, path: str, token: str, body: Any = None,  # noqa: ANN401
                headers: dict[str, str] | None = None, timeout_s: float = 300,
                key: str | None = None) -> tuple[int, dict[str, str], Any]:
        """Send a write with `Prefer: wait=30`; while it outlasts the wait (202), send it again with the same key."""
        key = key or str(uuid.uuid4())
        h = {"Prefer": "wait=30", "Idempotency-Key": key, **(headers or {})}
        status, hdrs, payload = self.call(method, path, token, body, h)
        deadline = time.monotonic() + timeout_s
        while status == 202:  # the first decision waits for Spark's start; the outcome is at /commands/{key}
            if time.monotonic() > deadline:
                raise CheckFailed(f"{method} {path} not decided within {timeout_s:.0f} s")
            time.sleep(3)
            status, hdrs, payload = self.call(method, path, token, body, h)  # the same key: the same command
        return status, hdrs, payload


def expect(what: str, got: object, want: object) -> None:
    if got != want:
        raise CheckFailed(f"{what}: expected {want!r}, got {got!r}")
    log(f"ok: {what} = {got!r}")


def wait_components(compose: Compose, timeout_s: float) -> None:
    """Wait until every component runs and the healthchecked ones are healthy; fail on a restart."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = compose.states()
        missing = [s for s in RUNNING if s not in states]
        if missing:
            raise CheckFailed(f"no container for {missing}")
        restarted = {s: states[s][2] for s in RUNNING if states[s][2]}
        if restarted:
            raise CheckFailed(f"restarted: {restarted}")
        waiting = {s: states[s][:2] for s in RUNNING
                   if states[s][0] != "running" or (s in HEALTHY and states[s][1] != "healthy")}
        if not waiting:
            log(f"ok: running {', '.join(RUNNING)}; healthy {', '.join(HEALTHY)}; no restarts")
            return
        if time.monotonic() > deadline:
            raise CheckFailed(f"not running/healthy after {timeout_s:.0f} s: {waiting}")
        time.sleep(5)


def token(compose: Compose, principal: str, *scopes: str) -> str:
    args = [a for s in scopes for a in ("--scope", s)]
    out = compose.run("exec", "-T", "api", "arbiter", "token", principal, *args).stdout.strip()
    if out.count(".") != 2:
        raise CheckFailed(f"`arbiter token {principal}` printed {out!r}, not a JWT")
    return out


def first_life(compose: Compose, api: Api) -> dict[str, Any]:
    """The first `up`: the README's API flow. Returns what the second life must still find."""
    compose.run("up", "-d", "--build")  # item 2 of issue 38: this failed on every empty broker
    api.ready(START_S)
    wait_components(compose, START_S)
    alice = token(compose, "alice")
    operator = token(compose, "ops", "arbiter:operate")
    doc_id = f"doc-{uuid.uuid4().hex[:8]}"
    created_cmd = str(uuid.uuid4())
    status, hdrs, _ = api.decided("POST", "/objects", alice, {"id": doc_id, "document": {"title": "compose"}},
                                  key=created_cmd)
    expect("create: status", status, 201)
    expect("create: ETag", hdrs.get("etag"), '"1"')
    position = hdrs.get("arbiter-position")
    if not position:
        raise CheckFailed(f"create answered without Arbiter-Position: {hdrs}")
    status, hdrs, body = api.call("GET", f"/objects/{doc_id}", alice, headers={"Arbiter-Min-Position": position})
    expect("read at the write's position: status", status, 200)
    expect("read at the write's position: document", body, {"title": "compose"})
    status, hdrs, _ = api.decided("PATCH", f"/objects/{doc_id}", alice, {"status": "reviewed"}, {"If-Match": '"1"'})
    expect("If-Match update: status", status, 200)
    expect("If-Match update: ETag", hdrs.get("etag"), '"2"')
    status, _, body = api.call("GET", f"/objects/{doc_id}", alice,
                               headers={"Arbiter-Min-Position": hdrs.get("arbiter-position", "")})
    expect("read at the update's position", (status, body), (200, {"title": "compose", "status": "reviewed"}))
    status, _, body = api.decided("PATCH", f"/objects/{doc_id}", alice, {"status": "stale"}, {"If-Match": '"1"'})
    expect("stale If-Match: status", status, 412)
    history = events(api, alice, doc_id)
    expect("history", history, [(1, "CREATED"), (2, "UPDATED")])
    status, _, figures = api.call("GET", "/status.json", operator)
    expect("/status.json with an operator token: status", status, 200)
    status, _, _ = api.call("GET", "/status.json", alice)
    expect("/status.json with a user's token: status", status, 403)
    status, _, _ = api.call("GET", "/", None)
    expect("status page: status", status, 200)
    return {"doc": doc_id, "history": history, "command": created_cmd, "position": position}


def events(api: Api, tok: str, doc_id: str) -> list[tuple[int, str]]:
    status, _, body = api.call("GET", f"/objects/{doc_id}/events", tok)
    if status != 200:
        raise CheckFailed(f"history of {doc_id}: {status} {body}")
    return [(e["version"], e["type"]) for e in body["events"]]


def second_life(compose: Compose, api: Api, first: dict[str, Any]) -> None:
    """`down` then `up`: topics, read model, audit trail and checkpoints all kept; the pipeline decides again."""
    compose.run("down")
    compose.run("up", "-d")
    api.ready(START_S)
    wait_components(compose, START_S)
    alice = token(compose, "alice")
    status, hdrs, body = api.call("GET", f"/objects/{first['doc']}", alice)
    expect("after down/up: the earlier document", (status, hdrs.get("etag"), body),
           (200, '"2"', {"title": "compose", "status": "reviewed"}))
    expect("after down/up: its history", events(api, alice, first["doc"]), first["history"])
    # A new API process: its outcome cache is empty, so this is answered from the audit trail.
    status, _, body = api.call("GET", f"/commands/{first['command']}", alice)
    expect("after down/up: the first command's audited outcome", (status, (body or {}).get("status"),
           (body or {}).get("version")), (200, "accepted", 1))
    doc_id = f"doc-{uuid.uuid4().hex[:8]}"
    status, hdrs, _ = api.decided("POST", "/objects", alice, {"id": doc_id, "document": {"after": "restart"}})
    expect("after down/up: a new write decided", (status, hdrs.get("etag")), (201, '"1"'))
    wait_components(compose, 120)  # and nothing crash-looped meanwhile (issue 38 item 1)


def keep_what_is_left(compose: Compose) -> None:
    """The README's way out after lost topics, first step: stop, and copy the data volume out with `tar`."""
    import tarfile
    import tempfile

    compose.run("stop")
    with tempfile.TemporaryDirectory(prefix="arbiter-compose-check-") as out:
        compose.run("run", "--rm", "--no-deps", "-v", f"{out}:/out", "--entrypoint", "tar", "api",
                    "czf", "/out/arbiter-data-before-reset.tgz", "-C", "/data", ".")
        with tarfile.open(Path(out) / "arbiter-data-before-reset.tgz") as tar:
            tops = {Path(n).parts[0] for n in tar.getnames() if Path(n).parts}  # "./audit/x" -> "audit"
    expect("the copied volume holds the read model, the audit trail and the checkpoints",
           sorted({"read_model", "audit", "checkpoints"} & tops), ["audit", "checkpoints", "read_model"])


def loader_accepts_every_profile(compose: Compose) -> None:
    """The profiles whose images cannot be built here: the compose loader accepts them with the secret alone."""
    compose.run("config", "-q")
    compose.run("--profile", "observability", "--profile", "cluster", "config", "-q")
    services = compose.run("--profile", "observability", "--profile", "cluster", "config", "--services").stdout.split()
    expect("services of both profiles", {"prometheus", "grafana", "grafana-password", "metrics-token",
                                         "otel-collector", "jaeger", "spark-master", "spark-worker"} <= set(services),
           True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docker", default="docker", help="the docker client to use")
    parser.add_argument("--compose", default="docker-compose", help="the Compose program to use (v1 or v2)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped check still runs `down -v` (finally)
    port = free_port()
    compose = Compose(args.docker, args.compose, port)
    api = Api(port)
    log(f"project {compose.project}, API on 127.0.0.1:{port}")
    started = time.monotonic()
    try:
        loader_accepts_every_profile(compose)
        first = first_life(compose, api)
        log(f"first life done ({time.monotonic() - started:.0f} s)")
        second_life(compose, api, first)
        log(f"second life done ({time.monotonic() - started:.0f} s)")
        keep_what_is_left(compose)
        return 0
    except (CheckFailed, subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
        log(f"FAILED: {type(e).__name__}: {e}")
        print(compose.logs(), file=sys.stderr)
        return 1
    finally:
        compose.run("down", "-v", "--remove-orphans", check=False)


if __name__ == "__main__":
    sys.exit(main())
