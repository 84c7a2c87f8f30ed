"""Fixtures for the real outside systems. Integration and e2e tests use the Redis and RabbitMQ at
REDIS_URL / AMQP_URL (defaults on 127.0.0.1); when those do not answer and a Docker engine is
reachable, testcontainers starts them; when neither works the tests fail with a clear message."""
from __future__ import annotations

import os
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from argon2 import PasswordHasher

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def answers(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def docker_reachable() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every test must have its own id: pytest-xdist hands tests to workers by id, and of tests sharing
    one it runs a single test and reports nothing about the rest."""
    counts = Counter(item.nodeid for item in session.items)
    shared = sorted(nodeid for nodeid, count in counts.items() if count > 1)
    if shared:
        raise pytest.UsageError(f"{len(shared)} test ids are shared by several tests, e.g. {shared[0]}")


@pytest.fixture(autouse=True)
def quick_password_hashes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Passwords hashed in the test process at argon2's lowest cost. At the production cost (64 MiB, three
    passes: a third of a second a hash here, several times that on a busy machine) hashing took half the
    gateway tests' time, and they test what is done with a hash, not what it costs. Services the tests start
    as processes keep the production cost, and tests marked production_password_cost check it."""
    if request.node.get_closest_marker("production_password_cost"):
        yield
        return
    from services.gateway import passwords

    monkeypatch.setattr(passwords, "_hasher", PasswordHasher(time_cost=1, memory_cost=8, parallelism=1))
    passwords._dummy_hash.cache_clear()  # made at the cost of the hasher that made it
    yield
    passwords._dummy_hash.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def shared_model_exports(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The ONNX copy of the embedding model is exported once per session (seconds), not once per data
    folder: every retrieval service a test starts, in this process or another, reads MODELS_DIR."""
    os.environ.setdefault("MODELS_DIR", str(tmp_path_factory.mktemp("models")))


def _missing(what: str, url: str, install: str) -> None:
    pytest.fail(
        f"{what} does not answer at {url} and no Docker engine is reachable for testcontainers. "
        f"Start it ({install}) or point the URL variable at one.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)
    if answers(url, 6379):
        yield url
    elif docker_reachable():
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7-alpine") as container:
            yield f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0"
    else:
        _missing("Redis", url, "redis-server --daemonize yes")


@pytest.fixture(scope="session")
def amqp_url() -> Iterator[str]:
    url = os.environ.get("AMQP_URL", DEFAULT_AMQP_URL)
    if answers(url, 5672):
        yield url
    elif docker_reachable():
        from testcontainers.rabbitmq import RabbitMqContainer

        with RabbitMqContainer("rabbitmq:3-management-alpine") as container:
            params = container.get_connection_params()
            yield f"amqp://guest:guest@{params.host}:{params.port}/"
    else:
        _missing("RabbitMQ", url, "rabbitmq-server -detached")


@pytest.fixture
def unique() -> str:
    """A fresh name so tests never collide with each other or with earlier runs on the same broker."""
    return f"test-{uuid.uuid4().hex[:10]}"
