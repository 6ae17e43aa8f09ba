"""The asyncio client: ``AsyncClient(base_url, token)`` runs the same plans as ``Client`` over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx

from arbiter_client.errors import ArbiterError, TransportFailed
from arbiter_client.feed import FeedCursor, SseParser
from arbiter_client.models import Accepted, Change, Document, HistoryEvent, ListedObject, Queued
from arbiter_client.plans import Plan, Protocol, Reply, Sleep, T, _path, raise_for
from arbiter_client.retry import RetryPolicy, parse_retry_after
from arbiter_client.sync import _error


async def run_async(plan: Plan[T], client: httpx.AsyncClient) -> T:
    """Run ``plan`` on ``client``, sleeping with asyncio."""
    reply: Reply = None
    try:
        while True:
            step = plan.send(reply)
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                reply = None
                continue
            try:
                reply = await client.send(step)
            except httpx.TransportError as e:
                reply = e
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


class AsyncClient:
    """``Client``'s twin for asyncio: the same operations, awaited; ``objects``, ``history`` and ``changes`` are
    async iterators."""

    def __init__(self, base_url: str | Sequence[str], token: str | Callable[[], str], *, retry: RetryPolicy | None = None,
                 wait_s: float = 10.0, follow_timeout_s: float = 60.0, read_your_writes: bool = True,
                 timeout: float = 30.0, feed_read_timeout_s: float = 60.0,
                 on_retry: Callable[[ArbiterError, float], None] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.protocol = Protocol(base_url, token, retry=retry, wait_s=wait_s, follow_timeout_s=follow_timeout_s,
                                 read_your_writes=read_your_writes, on_retry=on_retry)
        self.feed_read_timeout_s = feed_read_timeout_s
        self._http = httpx.AsyncClient(timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, plan: Plan[T]) -> T:
        return await run_async(plan, self._http)

    async def create(self, document: dict[str, Any], object_id: str | None = None, *, type: str | None = None,  # noqa: A002
                     **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return await self._run(self.protocol.create(document, object_id, type=type, **kw))

    async def update(self, object_id: str, patch: dict[str, Any], **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return await self._run(self.protocol.update(object_id, patch, **kw))

    async def delete(self, object_id: str, **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return await self._run(self.protocol.delete(object_id, **kw))

    async def grant(self, object_id: str, principal: str, role: str = "reader", **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return await self._run(self.protocol.grant(object_id, principal, role, **kw))

    async def revoke(self, object_id: str, principal: str, role: str = "reader", **kw: Any) -> Accepted | Queued:  # noqa: ANN401
        return await self._run(self.protocol.revoke(object_id, principal, role, **kw))

    async def update_with_retry(self, object_id: str, fn: Callable[[dict[str, Any]], dict[str, Any]], *,
                                attempts: int = 10, **kw: Any) -> Accepted:  # noqa: ANN401
        return await self._run(self.protocol.update_with_retry(object_id, fn, attempts=attempts, **kw))

    async def follow(self, queued: Queued) -> Accepted:
        return await self._run(self.protocol.follow(queued))

    async def get(self, object_id: str, version: int | None = None) -> Document:
        return await self._run(self.protocol.get(object_id, version))

    async def objects(self, role: str | None = None, updated_since: str | None = None,
                      page_size: int = 100) -> AsyncIterator[ListedObject]:
        for plan in self.protocol.object_pages(role, updated_since, page_size):
            items, _ = await self._run(plan)
            for item in items:
                yield item

    async def history(self, object_id: str, *, after_version: int = 0,
                      page_size: int = 100) -> AsyncIterator[HistoryEvent]:
        for plan in self.protocol.history_pages(object_id, after_version=after_version, page_size=page_size):
            events, _ = await self._run(plan)
            for event in events:
                yield event

    async def changes(self, object_id: str | None = None, *,
                      last_event_id: str | None = None) -> AsyncIterator[Change]:
        """``Client.changes``, async: resumes by ``Last-Event-ID`` on every drop or reset."""
        cursor = FeedCursor(object_id, last_event_id)
        path = "/changes" if object_id is None else _path("objects", object_id, "changes")
        failures = 0
        while not cursor.ended():
            request = self.protocol.request("GET", path, headers=cursor.headers())
            retry_after: float | None = None
            try:
                async with self._http.stream("GET", request.url, headers=request.headers,
                                             timeout=httpx.Timeout(10.0, read=self.feed_read_timeout_s)) as response:
                    if response.status_code in (429, 503):
                        await response.aread()
                        retry_after = parse_retry_after(response.headers.get("retry-after"))
                        error = _error(response)
                    elif response.status_code == 204:
                        return
                    else:
                        if response.status_code >= 400:
                            await response.aread()
                        raise_for(response)
                        failures = 0
                        parser = SseParser()
                        async for line in response.aiter_lines():
                            msg = parser.line(line)
                            if msg is not None:
                                change = cursor.take(*msg)
                                if change is not None:
                                    yield change
                        if cursor.ended():
                            return
                        error = TransportFailed("the stream ended")
            except httpx.TransportError as e:
                error = TransportFailed(f"{type(e).__name__}: {e}")
            failures += 1
            wait = self.protocol.retry.delay(failures, retry_after)
            if wait is None:
                raise error
            if self.protocol.on_retry is not None:
                self.protocol.on_retry(error, wait)
            await asyncio.sleep(wait)
