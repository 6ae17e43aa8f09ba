"""The API refuses a placeholder or short ARBITER_AUTH_SECRET unless it is development bound to loopback only."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from app.api.callers.secret_policy import MIN_SECRET_BYTES, is_loopback, secret_problem
from app.api.main import create_app
from app.cli import main
from app.errors import SetupError
from app.settings import PLACEHOLDER_SECRET, Settings

pytestmark = pytest.mark.unit

STRONG = "x" * MIN_SECRET_BYTES
SHORT = "x" * (MIN_SECRET_BYTES - 1)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"])
def test_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.5", "192.168.1.2", "example.com", "localhost.evil"])
def test_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(("secret", "environment", "host", "refused"), [
    (PLACEHOLDER_SECRET, "development", "127.0.0.1", False),
    (SHORT, "development", "::1", False),
    (PLACEHOLDER_SECRET, "development", "0.0.0.0", True),
    (SHORT, "development", "0.0.0.0", True),
    (SHORT, "production", "127.0.0.1", True),
    (STRONG, "production", "0.0.0.0", False),
    (STRONG, "development", "0.0.0.0", False),
    ("é" * 16, "production", "0.0.0.0", False),  # 32 bytes of UTF-8
])
def test_secret_policy(secret: str, environment: str, host: str, refused: bool) -> None:
    s = Settings(auth_secret=SecretStr(secret), environment=environment)
    assert (secret_problem(s, host) is not None) == refused


def test_create_app_refuses_a_weak_secret_on_a_public_address() -> None:
    with pytest.raises(SetupError, match="ARBITER_AUTH_SECRET is the development placeholder") as e:
        create_app(Settings(api_host="0.0.0.0"))
    assert e.value.code == "WEAK_SECRET"
    create_app(Settings(api_host="0.0.0.0", auth_secret=SecretStr(STRONG)))


def test_arbiter_api_refuses_before_serving(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import uvicorn

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("uvicorn must not start")

    monkeypatch.setattr(uvicorn, "run", never)
    monkeypatch.setenv("ARBITER_AUTH_SECRET", SHORT)
    from app.settings import get_settings
    get_settings.cache_clear()
    try:
        assert main(["api", "--host", "0.0.0.0"]) == 2
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert "WEAK_SECRET" in err and "fewer than 32" in err and SHORT not in err
