"""Property-based HTTP tests against the OpenAPI document (schemathesis), over loopback, on the real broker.

Every generated request, valid or not: no 5xx except the documented 503 (with Retry-After), every 4xx and
5xx is application/problem+json, and responses conform to the document.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import ignored_auth, missing_required_header

from app.api.main import create_app
from app.kafka_broker import free_port
from app.settings import Settings
from app.topics import ensure_topics
from tests.integration.test_api_support import auth

pytestmark = pytest.mark.integration


class _Read:
    def get(self, object_id: str) -> None:
        return None


@pytest.fixture(scope="module")
def api_url(base_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Settings]]:
    """The app under uvicorn on a free loopback port in a thread of this process; stopped at the end."""
    tag = uuid.uuid4().hex[:10]
    s = base_settings.model_copy(update={
        "topic_commands": f"commands-{tag}", "topic_events": f"events-{tag}", "topic_rejections": f"rejections-{tag}",
        "var_dir": tmp_path_factory.mktemp("api-openapi"), "max_body_bytes": 64 * 1024, "wait_max_s": 0.2})
    ensure_topics(s)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(s, read_model=_Read()), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", s
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def api_schema(api_url: tuple[str, Settings]):  # noqa: ANN201
    return schemathesis.openapi.from_url(f"{api_url[0]}/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_undocumented_5xx_and_every_error_is_a_problem(case, api_url) -> None:  # noqa: ANN001
    base, s = api_url
    case.headers = {**(case.headers or {}), **auth(s, "fuzzer")}  # bad tokens are test_api_http's subject
    response = case.call(timeout=20)
    status = response.status_code
    headers = {k.lower(): v[0] if isinstance(v, list) else v for k, v in response.headers.items()}
    assert status < 500 or status == 503, f"{case.method} {case.formatted_path} -> {status}: {response.text[:500]}"
    if status == 503:
        assert "retry-after" in headers
    if status >= 400:
        assert headers["content-type"].startswith("application/problem+json"), response.text[:300]
        body = response.json()
        assert body["status"] == status and body["code"] and body["detail"]
    # The token is injected above, so the checks that send no or bad credentials do not apply here.
    case.validate_response(response, excluded_checks=[missing_required_header, ignored_auth])
