"""The Python client (clients/python) against the live pipeline: the real validator and DB projection (the shared
running Arbiter) and an audit projection behind an API of this test's under uvicorn (a 1 s feed heartbeat). Typed
outcomes and rejections, the If-Match loop under a real race, a followed 202, read-your-writes, cursor pages, the
change feed resumed across two cut connections, and the async flavour. Objects and principals carry the test's tag."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import threading

import pytest

from app.api.main import create_app
from app.settings import Settings
from arbiter_client import (
    Accepted,
    AlreadyExists,
    AsyncClient,
    Change,
    Client,
    Deleted,
    Forbidden,
    IdempotencyKeyReused,
    NotFound,
    Queued,
    VersionConflict,
)
from tests.docs_snippets import snippet
from tests.integration.tcp_cut import relay_to
from tests.integration.test_api_changes import until
from tests.integration.test_api_support import RunningArbiter, audit_projection_running, served, token

pytestmark = pytest.mark.integration


def test_the_client_against_the_live_pipeline(arbiter: RunningArbiter) -> None:
    s, tag = arbiter.settings.model_copy(update={"changes_heartbeat_s": 1.0}), arbiter.tag
    doc, bob_name = f"doc-{tag}", f"bob-{tag}"
    with audit_projection_running(s), served(create_app(s)) as url:
        alice, bob, mallory, eve = (Client(url, token(s, f"{p}-{tag}"), wait_s=30)
                                    for p in ("alice", "bob", "mallory", "eve"))
        created = alice.create({"n": 0, "title": "plan"}, doc)
        assert isinstance(created, Accepted) and created.version == 1 and created.event == "CREATED"
        assert created.position is not None and created.position.startswith("events:")
        assert alice.get(doc).document == {"n": 0, "title": "plan"}  # read-your-writes: no polling here
        assert alice.grant(doc, bob_name, "editor").version == 2
        assert alice.grant(doc, f"mallory-{tag}").version == 3

        # typed rejections, decided by the validator
        with pytest.raises(AlreadyExists):
            bob.create({}, doc)
        with pytest.raises(NotFound):
            eve.update(doc, {"n": 9})
        with pytest.raises(Forbidden):
            mallory.update(doc, {"n": 9})
        with pytest.raises(VersionConflict) as conflict:
            bob.update(doc, {"n": 9}, if_match=1)
        assert conflict.value.current_version == 3 and conflict.value.status == 412
        alice.update(doc, {"k": 1}, key="same-key")
        assert alice.update(doc, {"k": 1}, key="same-key").version == 4  # a retry: the original outcome
        with pytest.raises(IdempotencyKeyReused):
            alice.update(doc, {"k": 2}, key="same-key")

        # a 202 followed at its Location
        queued = alice.update(doc, {"q": True}, wait=0, follow=False)
        assert isinstance(queued, Queued) and queued.location == f"/commands/{queued.command_id}"
        followed = alice.follow(queued)
        assert followed.version == 5 and followed.position is None
        assert alice.get(doc).version == 5  # read-your-writes for a followed write: by its version

        # the feed, opened through a relay whose connections are cut twice while the racers write
        changes: list[Change] = []
        with relay_to(url) as (relayed, relay):
            feed_client = Client(relayed, token(s, f"alice-{tag}"))
            feed = feed_client.changes(doc)

            def read() -> None:
                for change in feed:
                    changes.append(change)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            until(lambda: relay.accepted == 1, "the feed to connect")
            until(lambda: b": live\n\n" in relay.answered, "the feed to be live")  # before the writes start

            failures: list[BaseException] = []
            versions: list[int] = []

            def racer(client: Client) -> None:
                try:
                    for _ in range(5):
                        versions.append(client.update_with_retry(doc, lambda d: {**d, "n": d["n"] + 1}).version)
                except BaseException as e:  # noqa: BLE001 - reported by the test thread
                    failures.append(e)

            racers = [threading.Thread(target=racer, args=(c,)) for c in (alice, bob)]
            for t in racers:
                t.start()
            for cut_at in (3, 7):
                until(lambda n=cut_at: len(changes) >= n, f"{cut_at} changes on the feed")  # type: ignore[misc]
                relay.cut()
            for t in racers:
                t.join(120)
            assert not failures, failures
            assert sorted(versions) == list(range(6, 16)), versions  # every increment its own version
            # alice's reads wait for her own writes only: bob's last one may still be on its way to the read model
            until(lambda: alice.get(doc).version == 15, "the read model to serve version 15")
            assert alice.get(doc).document["n"] == 10, "an increment was lost in the If-Match race"
            deleted = alice.delete(doc)
            assert deleted.version == 16 and deleted.event is None
            reader.join(60)
            assert not reader.is_alive(), "the object's feed did not end after DELETED"
            assert relay.accepted >= 3, relay.accepted
            feed_client.close()
        assert [c.version for c in changes] == list(range(6, 17)), [(c.version, c.type) for c in changes]
        assert changes[-1].type == "DELETED" and all(c.id for c in changes)
        with pytest.raises(Deleted):
            alice.get(doc)

        # pages: lists by cursor, history by next_after_version
        for i in range(5):
            alice.create({"i": i}, f"item-{i}-{tag}")
        # GET /objects takes no Arbiter-Min-Position: the last creates may take a moment to be listed
        until(lambda: [o.id for o in alice.objects(role="owner", page_size=2)] == [f"item-{i}-{tag}" for i in range(5)],
              "the five items listed, two a page")
        assert [e.version for e in alice.history(doc, page_size=3)] == list(range(1, 17))
        assert [e.type for e in alice.history(doc, page_size=3)][:3] == ["CREATED", "EDITOR_GRANTED", "READER_GRANTED"]

        asyncio.run(_async_flavour(url, s, tag))
        _readme_example(url, token(s, f"reader-of-the-readme-{tag}"))
        for c in (alice, bob, mallory, eve):
            c.close()


async def _async_flavour(url: str, s: Settings, t: str) -> None:
    async with AsyncClient(url, token(s, f"carol-{t}"), wait_s=30) as carol:
        created = await carol.create({"n": 0}, f"async-doc-{t}")
        assert isinstance(created, Accepted) and created.version == 1
        outcomes = await asyncio.gather(*(carol.update_with_retry(f"async-doc-{t}", lambda d: {**d, "n": d["n"] + 1})
                                          for _ in range(4)))
        assert sorted(o.version for o in outcomes) == [2, 3, 4, 5]
        assert (await carol.get(f"async-doc-{t}")).document == {"n": 4}
        assert [o.id async for o in carol.objects(page_size=1)] == [f"async-doc-{t}"]
        assert [e.version async for e in carol.history(f"async-doc-{t}")] == [1, 2, 3, 4, 5]


def _readme_example(url: str, bearer: str) -> None:
    """Run the docs' client example as printed (docs/clients.md), pointed at this API and token by the variables it
    reads, and check what it prints."""
    env = {"ARBITER_API_URL": url, "ARBITER_TOKEN": bearer}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    runs: list[list[str]] = []
    try:
        for _ in range(2):  # run twice, as a reader trying it again would: each run makes its own object
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(snippet("client_example.py"), "client_example.py", "exec"), {})  # noqa: S102 - the docs' code
            runs.append(out.getvalue().splitlines())
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for lines in runs:
        assert len(lines) == 2 and re.fullmatch(r"plan-[0-9a-f]{8} is at version 3", lines[0]), runs
        assert lines[1] == "['CREATED', 'EDITOR_GRANTED', 'UPDATED']", runs
    assert runs[0][0] != runs[1][0], runs
