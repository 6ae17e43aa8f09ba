"""Arbiter's protocol, once, without I/O: each operation is a generator of steps that the sync and async clients run.

A plan yields an ``httpx.Request`` (the driver sends it and sends back the ``httpx.Response``, or the
``httpx.TransportError`` it raised) or a ``Sleep`` (the driver sleeps), and returns the operation's result. So
retries, the If-Match loop, following ``Location`` and read-your-writes are written here once for both flavours,
and the unit tests run them against ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from arbiter_client.errors import CODES, ArbiterError, Duplicate, TransportFailed, VersionConflict, error_from
from arbiter_client.merge_patch import diff
from arbiter_client.models import Accepted, Document, HistoryEvent, ListedObject, Queued, fields_of
from arbiter_client.retry import RetryPolicy, parse_retry_after

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Sleep:
    """A step asking the driver to wait ``seconds`` before the plan goes on."""

    seconds: float


Step = httpx.Request | Sleep
Reply = httpx.Response | httpx.TransportError | None
Plan = Generator[Step, Reply, T]

POSITION = "Arbiter-Position"
MIN_POSITION = "Arbiter-Min-Position"
#: Positions the server takes on one read (``app.api.reads.position.MAX_POSITIONS``); one per partition is plenty.
MAX_POSITIONS = 64
#: Objects whose last written version the client remembers for read-your-writes of followed 202s.
KNOWN_VERSIONS = 10_000


def _path(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def _json_or_none(response: httpx.Response) -> Any:  # noqa: ANN401 - parsed JSON
    try:
        return response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def raise_for(response: httpx.Response) -> None:
    """Raise the typed error of a 4xx/5xx answer."""
    if response.status_code >= 400:
        raise error_from(response.status_code, response.headers, _json_or_none(response))


def _etag_version(response: httpx.Response) -> int | None:
    tag = response.headers.get("etag", "").strip('"')
    return int(tag) if tag.isdigit() else None


class Protocol:
    """The client's state and its operations as plans: base URL, token, retry policy, and what it wrote.

    ``positions`` holds, per partition of the events topic, the highest ``Arbiter-Position`` of this client's
    accepted writes; reads send them as ``Arbiter-Min-Position`` (read-your-writes) when ``read_your_writes``.
    """

    def __init__(self, base_url: str | Sequence[str], token: str | Callable[[], str], *,
                 retry: RetryPolicy | None = None, wait_s: float = 10.0, follow_timeout_s: float = 60.0,
                 read_your_writes: bool = True, on_retry: Callable[[ArbiterError, float], None] | None = None) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("give the client at least one base URL")
        # Several API replicas: requests take them in turn, and a request that failed in transport is sent again
        # to the next one (a write with its same Idempotency-Key: the validator applies it once, whichever took it).
        self.base_urls = [httpx.URL(u.rstrip("/") + "/") for u in urls]
        self._turn = 0
        self.on_retry = on_retry  # told of each retry (the error, the seconds it waits): for logs and metrics
        self._token = token
        self.retry = retry or RetryPolicy()
        self.wait_s = wait_s
        self.follow_timeout_s = follow_timeout_s
        self.read_your_writes = read_your_writes
        self.positions: dict[int, int] = {}
        self.versions: OrderedDict[str, int] = OrderedDict()

    # --- requests ----------------------------------------------------------------------------------------
    @property
    def base_url(self) -> httpx.URL:
        """The base URL the next request goes to."""
        return self.base_urls[self._turn % len(self.base_urls)]

    def _next_base(self) -> httpx.URL:
        base = self.base_url
        self._turn += 1
        return base

    def _elsewhere(self, request: httpx.Request) -> httpx.Request:
        """Return ``request`` aimed at the next replica's base URL (itself when there is one replica)."""
        if len(self.base_urls) == 1:
            return request
        url = str(request.url)
        old = next((b for b in self.base_urls if url.startswith(str(b))), None)
        if old is None:  # an absolute Location elsewhere: leave it
            return request
        new = self._next_base()
        if new == old:
            new = self._next_base()
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"host"]
        return httpx.Request(request.method, str(new) + url[len(str(old)):], headers=headers,
                             content=request.content, extensions=request.extensions)

    def token(self) -> str:
        return self._token() if callable(self._token) else self._token

    def request(self, method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None,  # noqa: ANN401
                params: dict[str, Any] | None = None, content_type: str = "application/json",
                timeout: float | None = None) -> httpx.Request:
        """Return a request to ``path`` (absolute, under the base URL) with the bearer token."""
        h = {"Authorization": f"Bearer {self.token()}", **(headers or {})}
        content = None
        if body is not None:
            content = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
            h["Content-Type"] = content_type
        url = self._next_base().join(path.lstrip("/"))
        q = {k: v for k, v in (params or {}).items() if v is not None}
        ext = {"timeout": httpx.Timeout(timeout).as_dict()} if timeout is not None else None
        return httpx.Request(method, url, params=q or None, headers=h, content=content, extensions=ext)

    def call(self, request: httpx.Request) -> Plan[httpx.Response]:
        """Send ``request`` until it is answered with something other than 429/503 or the policy gives up.

        Safe for writes because every write carries an Idempotency-Key: a timeout whose request did reach the
        broker is, sent again, the same command, which the validator deduplicates.
        """
        retry = 0
        while True:
            reply = yield request
            assert reply is not None
            retry_after: float | None = None
            if isinstance(reply, httpx.TransportError):
                error: ArbiterError = TransportFailed(f"{type(reply).__name__}: {reply}")
            elif reply.status_code in (429, 503):
                error = error_from(reply.status_code, reply.headers, _json_or_none(reply))
                retry_after = parse_retry_after(reply.headers.get("retry-after"))
            else:
                return reply
            retry += 1
            wait = self.retry.delay(retry, retry_after)
            if wait is None:
                if isinstance(reply, httpx.TransportError):
                    raise error from reply
                raise error
            if self.on_retry is not None:
                self.on_retry(error, wait)
            yield Sleep(wait)
            if isinstance(reply, httpx.TransportError):
                request = self._elsewhere(request)  # that replica may be down: the next one takes it

    # --- writes ------------------------------------------------------------------------------------------
    def write(self, method: str, path: str, object_id: str | None, *, body: Any = None,  # noqa: ANN401
              content_type: str = "application/json", if_match: int | None = None, key: str | None = None,
              wait: float | None = None, follow: bool = True) -> Plan[Accepted | Queued]:
        """Send a command with an Idempotency-Key (``key`` or a fresh uuid4) and ``Prefer: wait``; on a 202 follow
        ``Location`` until decided (``follow``). Return the outcome; raise the rejection's typed error."""
        key = key or str(uuid.uuid4())
        wait = self.wait_s if wait is None else wait
        headers = {"Idempotency-Key": key}
        if if_match is not None:
            headers["If-Match"] = f'"{if_match}"'
        if wait > 0:
            headers["Prefer"] = f"wait={wait:g}"
        request = self.request(method, path, body=body, headers=headers, content_type=content_type,
                               timeout=max(30.0, wait + 10.0))
        response = yield from self.call(request)
        raise_for(response)
        data = _json_or_none(response) or {}
        if response.status_code == 202:
            queued = Queued(data["command_id"], data["object_id"], data["partition"], data["offset"],
                            response.headers.get("location", f"/commands/{key}"))
            if not follow:
                return queued
            return (yield from self.follow(queued))
        version = data.get("version", _etag_version(response))
        if not isinstance(version, int):
            raise ArbiterError(f"a {response.status_code} answer without a version (ETag)", status=response.status_code)
        accepted = Accepted(data.get("command_id", key), data.get("object_id", object_id or ""), version,
                            data.get("event"), response.headers.get(POSITION))
        self._remember(accepted)
        return accepted

    def follow(self, queued: Queued) -> Plan[Accepted]:
        """Poll the command's ``Location`` until it is decided; return it if accepted, raise its rejection."""
        deadline = time.monotonic() + self.follow_timeout_s
        pause = 0.05
        while True:
            response = yield from self.call(self.request("GET", queued.location))
            if response.status_code == 404 and time.monotonic() < deadline:  # not decided (or not audited) yet
                yield Sleep(pause)
                pause = min(1.0, pause * 2)
                continue
            raise_for(response)
            data = response.json()
            if data["status"] == "accepted":
                accepted = Accepted(queued.command_id, data.get("object_id") or queued.object_id, int(data["version"]),
                                    data.get("event"), None)
                self._remember(accepted)
                return accepted
            reason = str(data.get("reason") or "REJECTED")
            raise CODES.get(reason, ArbiterError)(str(data.get("message") or reason), code=reason,
                                                  problem={**data, "current_version": data.get("version")})

    def _remember(self, accepted: Accepted) -> None:
        if accepted.position is not None:
            _, p, o = accepted.position.split(":")
            self.positions[int(p)] = max(int(o), self.positions.get(int(p), -1))
        self.versions[accepted.object_id] = accepted.version
        self.versions.move_to_end(accepted.object_id)
        while len(self.versions) > KNOWN_VERSIONS:
            self.versions.popitem(last=False)

    def create(self, document: dict[str, Any], object_id: str | None = None, *, type: str | None = None,  # noqa: A002
               **kw: Any) -> Plan[Accepted | Queued]:  # noqa: ANN401
        """Create ``document``; ``type`` makes it an object of that type, decided by the team's rules for it."""
        body: dict[str, Any] = {"document": document}
        if object_id is not None:
            body["id"] = object_id
        if type is not None:
            body["type"] = type
        return self.write("POST", "/objects", object_id, body=body, **kw)

    def update(self, object_id: str, patch: dict[str, Any], **kw: Any) -> Plan[Accepted | Queued]:  # noqa: ANN401
        return self.write("PATCH", _path("objects", object_id), object_id, body=patch,
                          content_type="application/merge-patch+json", **kw)

    def delete(self, object_id: str, **kw: Any) -> Plan[Accepted | Queued]:  # noqa: ANN401
        return self.write("DELETE", _path("objects", object_id), object_id, **kw)

    def grant(self, object_id: str, principal: str, role: str = "reader", **kw: Any) -> Plan[Accepted | Queued]:  # noqa: ANN401
        return self.write("PUT", _path("objects", object_id, _role(role), principal), object_id, **kw)

    def revoke(self, object_id: str, principal: str, role: str = "reader", **kw: Any) -> Plan[Accepted | Queued]:  # noqa: ANN401
        return self.write("DELETE", _path("objects", object_id, _role(role), principal), object_id, **kw)

    # --- reads -------------------------------------------------------------------------------------------
    def _read_headers(self) -> dict[str, str]:
        if not self.read_your_writes or not self.positions:
            return {}
        mine = sorted(self.positions.items())[:MAX_POSITIONS]
        return {MIN_POSITION: ", ".join(f"events:{p}:{o}" for p, o in mine)}

    def get(self, object_id: str, version: int | None = None) -> Plan[Document]:
        """Read the document (as of ``version`` if given). With read-your-writes, answered once the read model has
        passed this client's writes; a version this client wrote but whose position it does not know (a followed
        202) is waited for by reading again until the read model serves it."""
        deadline = time.monotonic() + self.follow_timeout_s
        pause = 0.05
        while True:
            response = yield from self.call(self.request(
                "GET", _path("objects", object_id), headers=self._read_headers(), params={"version": version}))
            raise_for(response)
            served = _etag_version(response) or 0
            wrote = self.versions.get(object_id, 0) if self.read_your_writes and version is None else 0
            if served >= wrote or time.monotonic() > deadline:
                return Document(object_id, served, response.json())
            yield Sleep(pause)
            pause = min(0.5, pause * 2)

    def update_with_retry(self, object_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]], *,
                          attempts: int = 10, **kw: Any) -> Plan[Accepted]:  # noqa: ANN401
        """Read the document, apply ``fn`` to a copy, write the difference as a merge patch with ``If-Match``;
        on ``VERSION_CONFLICT`` (or a rejected first attempt's ``DUPLICATE``) read again, until the read model
        serves the version the conflict named, and repeat. Raise the conflict after ``attempts`` of them."""
        at_least = 0
        for attempt in range(1, attempts + 1):
            current = yield from self.get(object_id)
            while current.version < at_least:  # the read model lags the validator: wait until it has the winner
                yield Sleep(0.05)
                current = yield from self.get(object_id)
            wanted = fn(json.loads(json.dumps(current.document)))
            patch = diff(current.document, wanted)
            try:
                outcome = yield from self.update(object_id, patch, if_match=current.version, follow=True, **kw)
            except (VersionConflict, Duplicate) as conflict:
                # DUPLICATE raised (not answered 200) means a first attempt of this very key was stored and rejected
                # (a conflict the API could not answer in time): nothing was applied, so it is a conflict too
                if attempt == attempts:
                    raise
                at_least = conflict.current_version or current.version + 1
                yield Sleep(self.retry.rng.uniform(0, 0.05 * attempt))
                continue
            assert isinstance(outcome, Accepted)
            return outcome
        raise AssertionError("unreachable")

    def object_pages(self, role: str | None = None, updated_since: str | None = None,
                     page_size: int = 100) -> Iterator[Plan[tuple[list[ListedObject], bool]]]:
        """Yield one plan per page of ``GET /objects`` (cursor-paged); each returns (items, more)."""
        cursor: list[str | None] = [None]

        def page() -> Plan[tuple[list[ListedObject], bool]]:
            params = {"role": role, "updated_since": updated_since, "limit": page_size, "cursor": cursor[0]}
            response = yield from self.call(self.request("GET", "/objects", params=params))
            raise_for(response)
            data = response.json()
            cursor[0] = data.get("next_cursor")
            return [_build(ListedObject, i) for i in data["items"]], cursor[0] is not None

        more = True
        while more:
            yield page()
            more = cursor[0] is not None

    def history_pages(self, object_id: str, *, after_version: int = 0, page_size: int = 100,
                      include_rejections: bool = False) -> Iterator[Plan[tuple[list[HistoryEvent], bool]]]:
        """Yield one plan per page of ``GET /objects/{id}/events``, oldest first, following ``next_after_version``."""
        after: list[int | None] = [after_version]

        def page() -> Plan[tuple[list[HistoryEvent], bool]]:
            params = {"after_version": after[0], "limit": page_size,
                      "include": "rejections" if include_rejections else None}
            response = yield from self.call(self.request("GET", _path("objects", object_id, "events"),
                                                         headers=self._read_headers(), params=params))
            raise_for(response)
            data = response.json()
            after[0] = data.get("next_after_version")
            return [_build(HistoryEvent, e) for e in data["events"]], after[0] is not None

        more = True
        while more:
            yield page()
            more = after[0] is not None


def _build(cls: type[T], data: dict[str, Any]) -> T:
    """Build one of the models from JSON, ignoring members a newer server may add."""
    names = set(fields_of(cls))
    return cls(**{k: v for k, v in data.items() if k in names})


def _role(role: str) -> str:
    if role not in ("reader", "editor"):
        raise ValueError(f"role must be 'reader' or 'editor', not {role!r}")
    return role + "s"


def run_sync(plan: Plan[T], send: Callable[[httpx.Request], httpx.Response],
             sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``plan`` with a blocking ``send``."""
    reply: Reply = None
    try:
        while True:
            step = plan.send(reply)
            if isinstance(step, Sleep):
                sleep(step.seconds)
                reply = None
                continue
            try:
                reply = send(step)
            except httpx.TransportError as e:
                reply = e
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
