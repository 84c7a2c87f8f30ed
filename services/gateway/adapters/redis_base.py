"""What the gateway's Redis adapters share: each call bounded by a timeout, and any Redis trouble
turned into 503 session_store_unavailable, so the gateway fails closed and recovers by itself."""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from shared.errors import DependencyUnavailable

T = TypeVar("T")


async def fail_closed(operation: Awaitable[T], *, timeout_s: float) -> T:
    """Await a Redis call; a failure or a slow answer becomes 503 session_store_unavailable."""
    try:
        async with asyncio.timeout(timeout_s):
            return await operation
    except (RedisError, OSError, TimeoutError) as exc:
        raise DependencyUnavailable("session_store", "the session store (Redis) is unavailable") from exc


def bounded(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A method of a RedisAdapter run as one fail_closed operation."""

    @functools.wraps(method)
    async def run(self: RedisAdapter, *args: Any, **kwargs: Any) -> T:
        return await fail_closed(method(self, *args, **kwargs), timeout_s=self._timeout_s)

    return run


class RedisAdapter:
    """Keys under `prefix`; every operation within `timeout_s`."""

    def __init__(self, redis: Redis, *, prefix: str, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive; got {timeout_s}")
        self._redis = redis
        self._prefix = prefix
        self._timeout_s = timeout_s

    async def ping(self) -> bool:
        try:
            return bool(await self._ping())
        except DependencyUnavailable:
            return False

    @bounded
    async def _ping(self) -> bool:
        return await self._redis.ping()
