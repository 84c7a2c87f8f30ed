"""Two gateway processes on one Redis and prefix, as two replicas behind a load balancer: a token, its end, a
`cairn user` command, the sessions' lifetimes and the record of who asked hold on both at once. Separate
processes, so that no state kept in a process's memory can pass for shared. (test_rate_limits covers the
login and chat limits shared by two gateways.)"""
from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from cairn import cli
from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.users import add_user
from tests.integration.gateway.chat_stand_in import PASSWORD, chat_stand_in
from tests.support import free_port, serve_in_thread, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


@contextmanager
def gateway_process(env: dict[str, str], data_dir: Path) -> Iterator[str]:
    """`python -m services.gateway` with `env` on a free port and its own data directory (outbox); yields its URL."""
    port = free_port()
    data_dir.mkdir(parents=True)
    log = (data_dir / "gateway.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "services.gateway"],
        env={**env, "GATEWAY_PORT": str(port), "CAIRN_DATA_DIR": str(data_dir)},
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert process.poll() is None, (data_dir / "gateway.log").read_text()
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(up, timeout=60, what=f"a gateway process on {url}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)
        log.close()


@contextmanager
def two_gateways(redis_url: str, prefix: str, tmp_path: Path, **settings: str) -> Iterator[tuple[str, str]]:
    with ExitStack() as stack:
        chat = stack.enter_context(serve_in_thread(chat_stand_in()))
        nowhere = f"http://127.0.0.1:{free_port()}"
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("OUTBOX_PATH", "CHAT_URL", "RETRIEVAL_URL")},
            "REDIS_URL": redis_url,
            "REDIS_PREFIX": prefix,
            "EVENTS_EXCHANGE": f"{prefix}.events",
            "ANALYTICS_QUEUE": f"{prefix}.analytics",
            "CHAT_URLS": chat,
            "RETRIEVAL_URLS": nowhere,
            "ANALYTICS_URL": nowhere,
            **settings,
        }
        one, two = (stack.enter_context(gateway_process(env, tmp_path / name)) for name in ("one", "two"))
        yield one, two


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def gateways(redis_url, prefix, tmp_path_factory) -> Iterator[tuple[str, str]]:
    with two_gateways(redis_url, prefix, tmp_path_factory.mktemp("side-by-side")) as urls:
        yield urls


def _new_user(redis_url: str, prefix: str) -> str:
    """A user of this test alone (the gateways are shared by the module's tests)."""
    name = f"u{uuid.uuid4().hex[:8]}"

    async def add() -> None:
        redis = connect(redis_url, timeout_s=2)
        try:
            users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
            await add_user(users=users, username=name, password=PASSWORD, roles=["user"])
        finally:
            await redis.aclose()

    asyncio.run(add())
    return name


def _login(base: str, username: str) -> dict[str, str]:
    response = httpx.post(f"{base}/auth/login", json={"username": username, "password": PASSWORD}, timeout=10)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _statuses(bases: tuple[str, ...], auth: dict[str, str]) -> list[int]:
    return [httpx.get(f"{base}/auth/me", headers=auth, timeout=10).status_code for base in bases]


def test_a_session_opened_on_one_gateway_is_listed_used_and_ended_on_the_other(gateways, redis_url, prefix):
    one, two = gateways
    user = _new_user(redis_url, prefix)
    phone, laptop = _login(one, user), _login(two, user)
    assert _statuses(gateways, phone) == _statuses(gateways, laptop) == [200, 200]

    listed = httpx.get(f"{two}/auth/sessions", headers=phone, timeout=10).json()["sessions"]
    assert [s["current"] for s in listed] == [True, False], "both logins, oldest first, seen from the other gateway"

    ended = httpx.delete(f"{two}/auth/sessions/{listed[1]['id']}", headers=phone, timeout=10)
    assert ended.status_code == 204 and _statuses(gateways, laptop) == [401, 401]
    assert httpx.post(f"{two}/auth/logout", headers=phone, timeout=10).status_code == 204
    assert _statuses(gateways, phone) == [401, 401]


@pytest.mark.parametrize(
    ("command", "stdin"),
    [
        (["disable"], ""),
        (["set-role", "--role", "analyst"], ""),
        (["reset-password", "--password-stdin"], "a brand new password\n"),
    ],
)
def test_a_user_command_ends_the_sessions_on_every_gateway(
    gateways, redis_url, prefix, monkeypatch, capsys, command, stdin
):
    one, two = gateways
    user = _new_user(redis_url, prefix)
    sessions = [_login(one, user), _login(two, user)]
    for auth in sessions:
        assert _statuses(gateways, auth) == [200, 200]
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("REDIS_PREFIX", prefix)
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli.main(["user", command[0], user, *command[1:]]) == 0
    assert "2 sessions ended" in capsys.readouterr().out
    for auth in sessions:
        assert _statuses(gateways, auth) == [401, 401]


def test_an_answer_asked_through_one_gateway_is_rated_through_the_other_by_its_asker_only(gateways, redis_url, prefix):
    one, two = gateways
    asker, other = _login(one, _new_user(redis_url, prefix)), _login(two, _new_user(redis_url, prefix))
    asked = httpx.post(f"{one}/api/chat", json={"query": "q"}, headers=asker, timeout=10)
    assert asked.status_code == 200
    request_id = asked.headers["x-request-id"]

    def rate(base: str, auth: dict[str, str]) -> int:
        body = {"request_id": request_id, "rating": 1}
        return httpx.post(f"{base}/api/feedback", json=body, headers=auth, timeout=10).status_code

    assert (rate(two, asker), rate(two, other), rate(one, other)) == (202, 404, 404)
    reused = {**other, "X-Request-ID": request_id}
    again = httpx.post(f"{two}/api/chat", json={"query": "q"}, headers=reused, timeout=10)
    assert again.status_code == 409, "the id was taken through the other gateway"


def test_idle_and_maximum_lifetimes_hold_whichever_gateway_serves(redis_url, tmp_path):
    prefix = f"test-{uuid.uuid4().hex[:10]}"
    lifetimes = {"SESSION_TTL_SECONDS": "2", "SESSION_MAX_AGE_SECONDS": "4"}
    with two_gateways(redis_url, prefix, tmp_path, **lifetimes) as (one, two):
        user = _new_user(redis_url, prefix)
        busy, idle = _login(one, user), _login(two, user)
        started = time.monotonic()
        while time.monotonic() - started < 3:  # used through both in turn, never idle for long
            assert _statuses((one, two), busy) == [200, 200]
            time.sleep(0.3)
        assert _statuses((two, one), idle) == [401, 401], "unused for over SESSION_TTL_SECONDS"
        time.sleep(max(0.0, started + 4.5 - time.monotonic()))
        assert _statuses((two, one), busy) == [401, 401], "past SESSION_MAX_AGE_SECONDS however busy"
