"""The blocking client: ``Client(base_url, token)`` runs the protocol's plans (``plans.py``) over ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

from arbiter_client.errors import ArbiterError, TransportFailed
from arbiter_client.feed import FeedCursor, SseParser
from arbiter_client.models import Accepted, Change, Document, HistoryEvent, ListedObject, Queued
from arbiter_client.plans import Plan, Protocol, T, _path, raise_for, run_sync
from arbiter_client.retry import RetryPolicy, parse_retry_after


class Client:
    """Arbiter's Command API, with its semantics built in (see docs/clients.md).

    Writes carry an Idempotency-Key and are retried on 503, 429 and transport failures (``retry``), wait for the
    decision (``Prefer: wait``, ``wait_s``) and follow ``Location`` on a 202; rejections raise typed errors
    (``arbiter_client.errors``). Reads carry this client's write positions (read-your-writes).
    """

    def __init__(self, base_url: str | Sequence[str], token: str | Callable[[], str], *, retry: RetryPolicy | None = None,
                 wait_s: float = 10.0, follow_timeout_s: float = 60.0, read_your_writes: bool = True,
                 timeout: float = 30.0, feed_read_timeout_s: float = 60.0,
                 on_retry: Callable[[ArbiterError, float], None] | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.protocol = Protocol(base_url, token, retry=retry, wait_s=wait_s, follow_timeout_s=follow_timeout_s,
                                 read_your_writes=read_your_writes, on_retry=on_retry)
        self.feed_read_timeout_s = feed_read_timeout_s
        self._http = httpx.Client(timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, plan: Plan[T]) -> T:
        return run_sync(plan, self._http.send)

    # --- writes: Accepted, or Queued with follow=False; rejections raise ----------------------------------
    def create(self, document: dict[str, Any], object_id: str | None = None, *, type: str | None = None,  # noqa: A002
               **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        """Create an object (``object_id`` or one the server derives from the idempotency key); ``type`` makes it
        an object of that type, so the team's rules for it decide (a refusal raises ``RuleViolated``/``RuleError``)."""
        return self._run(self.protocol.create(document, object_id, type=type, **kw))

    def update(self, object_id: str, patch: dict[str, Any], **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        """Apply a JSON merge patch; ``if_match=<version>`` makes it conditional."""
        return self._run(self.protocol.update(object_id, patch, **kw))

    def delete(self, object_id: str, **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return self._run(self.protocol.delete(object_id, **kw))

    def grant(self, object_id: str, principal: str, role: str = "reader", **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        """Let ``principal`` (or ``group:<name>``) read (``role="reader"``) or edit (``"editor"``) the object."""
        return self._run(self.protocol.grant(object_id, principal, role, **kw))

    def revoke(self, object_id: str, principal: str, role: str = "reader", **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return self._run(self.protocol.revoke(object_id, principal, role, **kw))

    def update_with_retry(self, object_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]], *,
                          attempts: int = 10, **kw: Any) -> Accepted:  # noqa: ANN401
        """Read-modify-write: ``fn(document) -> new document``, written with If-Match, repeated on a conflict."""
        return self._run(self.protocol.update_with_retry(object_id, fn, attempts=attempts, **kw))

    def follow(self, queued: Queued) -> Accepted:
        """Wait for a queued command's decision at its ``Location``."""
        return self._run(self.protocol.follow(queued))

    # --- reads ---------------------------------------------------------------------------------------
    def get(self, object_id: str, version: int | None = None) -> Document:
        return self._run(self.protocol.get(object_id, version))

    def objects(self, role: str | None = None, updated_since: str | None = None,
                page_size: int = 100) -> Iterator[ListedObject]:
        """Every object the caller may read, page after page by cursor."""
        for plan in self.protocol.object_pages(role, updated_since, page_size):
            items, _ = self._run(plan)
            yield from items

    def history(self, object_id: str, *, after_version: int = 0, page_size: int = 100) -> Iterator[HistoryEvent]:
        """The object's events, oldest first, page after page."""
        for plan in self.protocol.history_pages(object_id, after_version=after_version, page_size=page_size):
            events, _ = self._run(plan)
            yield from events

    def changes(self, object_id: str | None = None, *, last_event_id: str | None = None) -> Iterator[Change]:
        """Yield the change feed's frames (all objects, or ``object_id``'s), resuming by ``Last-Event-ID`` whenever
        the connection drops or the server resets the stream; ends when an object's stream ends for good."""
        cursor = FeedCursor(object_id, last_event_id)
        path = "/changes" if object_id is None else _path("objects", object_id, "changes")
        failures = 0
        while not cursor.ended():
            request = self.protocol.request("GET", path, headers=cursor.headers())
            retry_after: float | None = None
            try:
                with self._http.stream("GET", request.url, headers=request.headers,
                                       timeout=httpx.Timeout(10.0, read=self.feed_read_timeout_s)) as response:
                    if response.status_code in (429, 503):
                        response.read()
                        retry_after = parse_retry_after(response.headers.get("retry-after"))
                        error = _error(response)
                    elif response.status_code == 204:  # nothing more will come (a deleted object's resumed stream)
                        return
                    else:
                        if response.status_code >= 400:
                            response.read()
                        raise_for(response)
                        failures = 0  # connected: the policy counts failures in a row
                        parser = SseParser()
                        for line in response.iter_lines():
                            msg = parser.line(line)
                            if msg is not None:
                                change = cursor.take(*msg)
                                if change is not None:
                                    yield change
                        if cursor.ended():
                            return
                        error = TransportFailed("the stream ended")  # opened again from the last id
            except httpx.TransportError as e:
                error = TransportFailed(f"{type(e).__name__}: {e}")
            failures += 1
            wait = self.protocol.retry.delay(failures, retry_after)
            if wait is None:
                raise error
            if self.protocol.on_retry is not None:
                self.protocol.on_retry(error, wait)
            time.sleep(wait)


def _error(response: httpx.Response) -> ArbiterError:
    try:
        raise_for(response)
    except ArbiterError as e:  # the typed error of this answer, returned for a retry decision
        return e
    return TransportFailed(f"HTTP {response.status_code}")
