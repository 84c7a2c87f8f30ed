from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from cairn import cli
from services.gateway.main import create_app
from tests.integration.gateway.chat_stand_in import gateway_settings
from tests.own_redis import OwnRedis
from tests.support import free_port


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    """A redis-server of the test's own, for tests that stop it, freeze it or change its configuration."""
    redis = OwnRedis()
    redis.start()
    yield redis
    redis.stop()


@pytest.fixture
def client(redis_url: str, unique: str) -> Iterator[TestClient]:
    """The gateway on the shared Redis under a prefix of the test's own, with no chat behind it: for the routes
    it answers itself (login, sessions, users). A test module may define its own."""
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=f"http://127.0.0.1:{free_port()}")
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """The shared Redis as a client of its own, to read or damage what the gateway stored."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def cairn_user(redis_url: str, unique: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """Runs `cairn user ARGS` (with `stdin` as standard input) on the users under the test's prefix, those of
    `client`; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("REDIS_PREFIX", unique)

    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        code = cli.main(["user", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
