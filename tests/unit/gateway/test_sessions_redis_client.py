"""The Redis client the session store is given: its one quick retry must really happen on asyncio."""
import pytest
from redis.exceptions import ConnectionError

from services.gateway.adapters.redis_store import RedisSessionStore, connect

pytestmark = pytest.mark.unit


class _Flaky:
    """Fails the first `failures` calls as a stale pooled connection does, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("connection reset")
        return "PONG"


async def _no_op(error: Exception) -> None:
    pass


async def test_a_failed_command_is_retried_once_and_only_once():
    redis = connect("redis://127.0.0.1:1/0", timeout_s=1)  # connects lazily: nothing is contacted here
    retry = redis.get_retry()
    once = _Flaky(failures=1)
    assert await retry.call_with_retry(once, _no_op) == "PONG" and once.calls == 2
    twice = _Flaky(failures=2)
    with pytest.raises(ConnectionError):
        await retry.call_with_retry(twice, _no_op)
    assert twice.calls == 2
    await redis.aclose()


def test_a_store_needs_a_positive_timeout():
    redis = connect("redis://127.0.0.1:1/0", timeout_s=1)
    with pytest.raises(ValueError):
        RedisSessionStore(redis, prefix="p", timeout_s=0)
