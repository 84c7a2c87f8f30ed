"""Fail closed, recover alone: a gateway on its own redis-server (never the shared one), which the
tests kill and restart, or freeze and thaw, while the gateway serves."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest

from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import add_user
from shared.errors import RETRY_AFTER_S
from tests.support import free_port, serve_in_thread, wait_until

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery"
TIMEOUT_S = 0.5  # REDIS_TIMEOUT_S of the gateway under test
SLACK_S = 1.5  # for a busy two-core machine
UNAVAILABLE = {"error": "session_store_unavailable", "message": "the session store (Redis) is unavailable"}


async def _seed(url: str) -> None:
    redis = connect(url, timeout_s=2)
    await add_user(users=RedisUserStore(redis, prefix="cairn", timeout_s=2), username="ann", password=PASSWORD, roles=["user"])
    await redis.aclose()


@pytest.fixture
def gateway(own_redis) -> Iterator[str]:
    asyncio.run(_seed(own_redis.url))
    settings = Settings(redis_url=own_redis.url, redis_timeout_s=TIMEOUT_S, chat_url=f"http://127.0.0.1:{free_port()}")
    with serve_in_thread(create_app(settings)) as url:
        yield url


def _login(gateway: str) -> dict[str, str]:
    response = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}, timeout=10)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _assert_unavailable_in_time(gateway: str, auth: dict[str, str]) -> None:
    calls = [
        ("GET", "/auth/me", {"headers": auth}),
        ("POST", "/api/chat", {"headers": auth, "json": {"query": "q"}}),
        ("GET", "/auth/sessions", {"headers": auth}),
        ("POST", "/auth/login", {"json": {"username": "ann", "password": PASSWORD}}),
    ]
    for method, path, kwargs in calls:
        started = time.monotonic()
        response = httpx.request(method, f"{gateway}{path}", timeout=10, **kwargs)
        elapsed = time.monotonic() - started
        assert response.status_code == 503, (path, response.text)
        assert response.json() == UNAVAILABLE, path  # names the dependency, and nothing of the failure
        assert response.headers["retry-after"] == str(RETRY_AFTER_S), path
        assert elapsed < TIMEOUT_S + SLACK_S, (path, elapsed)
    ready = httpx.get(f"{gateway}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["checks"]["redis"] is False


def _causes_logged(caplog: pytest.LogCaptureFixture) -> set[str]:
    """The causes the gateway's "request failed" warnings name: the response leaves them out, the log must not."""
    return {record.cause for record in caplog.records if record.getMessage() == "request failed"}


def _status(gateway: str, auth: dict[str, str]) -> int:
    return httpx.get(f"{gateway}/auth/me", headers=auth, timeout=10).status_code


def test_redis_stopped_mid_test_is_503_then_the_gateway_recovers_alone(own_redis, gateway, caplog):
    auth = _login(gateway)
    assert _status(gateway, auth) == 200
    own_redis.kill()
    _assert_unavailable_in_time(gateway, auth)
    refused = f"ConnectionError: Error 111 connecting to 127.0.0.1:{own_redis.port}. Connection refused."
    assert _causes_logged(caplog) == {refused}

    own_redis.start()  # same port, empty: the sessions died with it
    wait_until(lambda: _status(gateway, auth) == 401, timeout=10, what="the gateway to use Redis again")
    asyncio.run(_seed(own_redis.url))
    assert _status(gateway, _login(gateway)) == 200


def test_redis_hung_mid_test_is_503_within_the_timeout_then_the_same_token_works(own_redis, gateway, caplog):
    auth = _login(gateway)
    own_redis.freeze()
    try:
        started = time.monotonic()
        _assert_unavailable_in_time(gateway, auth)
        assert time.monotonic() - started >= TIMEOUT_S  # it did wait for Redis, up to the bound
    finally:
        own_redis.thaw()
    assert _causes_logged(caplog) == {"TimeoutError"}
    wait_until(lambda: _status(gateway, auth) == 200, timeout=10, what="the gateway to recover")
