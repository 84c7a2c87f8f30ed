from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.own_redis import OwnRedis


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    """A redis-server of the test's own, for tests that stop it, freeze it or change its configuration."""
    redis = OwnRedis()
    redis.start()
    yield redis
    redis.stop()
