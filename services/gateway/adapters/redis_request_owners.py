"""Who asked which request, in Redis: `{prefix}:asked:{request_id}` holds the user id, with a TTL."""
from __future__ import annotations

from services.gateway.adapters.redis_base import RedisAdapter, fail_closed


class RedisRequestOwners(RedisAdapter):
    def _key(self, request_id: str) -> str:
        return f"{self._prefix}:asked:{request_id}"

    async def claim(self, request_id: str, *, user_id: str, ttl_s: int) -> bool:
        claimed = await fail_closed(self._redis.set(self._key(request_id), user_id, nx=True, ex=ttl_s), timeout_s=self._timeout_s)
        return bool(claimed)

    async def owner(self, request_id: str) -> str | None:
        return await fail_closed(self._redis.get(self._key(request_id)), timeout_s=self._timeout_s)

    async def release(self, request_id: str) -> None:
        await fail_closed(self._redis.delete(self._key(request_id)), timeout_s=self._timeout_s)
