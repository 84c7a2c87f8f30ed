"""Sliding-window rate limits in Redis: one sorted set of event times per bucket, checked and updated by
one Lua script, so replicas sharing the Redis never let more through than the limit. Times come
from Redis itself, so the replicas' clocks do not matter. Redis failing or slow is 503
session_store_unavailable, as for sessions: the gateway fails closed."""
from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from services.gateway.adapters.redis_base import RedisAdapter, fail_closed
from services.gateway.rate_limits import Bucket

# KEYS: the buckets. ARGV[1]: the event id; then events and window (ms) of each bucket in turn.
# Returns 0 after counting the event in every bucket, or the ms until all have room (nothing counted).
_TAKE = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local wait = 0
for i, key in ipairs(KEYS) do
  local events, window = tonumber(ARGV[2 * i]), tonumber(ARGV[2 * i + 1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count >= events then
    local frees = redis.call('ZRANGE', key, count - events, count - events, 'WITHSCORES')
    wait = math.max(wait, tonumber(frees[2]) + window - now)
  end
end
if wait > 0 then
  return wait
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[1])
  redis.call('PEXPIRE', key, tonumber(ARGV[2 * i + 1]))
end
return 0
"""


class RedisRateLimiter(RedisAdapter):
    """Buckets as sorted sets under `{prefix}:ratelimit:{key}`, expiring with their window."""

    def __init__(self, redis: Redis, *, prefix: str, timeout_s: float) -> None:
        super().__init__(redis, prefix=prefix, timeout_s=timeout_s)
        self._take = redis.register_script(_TAKE)

    def _key(self, key: str) -> str:
        return f"{self._prefix}:ratelimit:{key}"

    async def take(self, buckets: Sequence[Bucket], *, event_id: str) -> float:
        args: list[str | int] = [event_id]
        for bucket in buckets:
            args += [bucket.limit.events, max(1, round(bucket.limit.window_s * 1000))]
        wait_ms = await fail_closed(
            self._take(keys=[self._key(b.key) for b in buckets], args=args), timeout_s=self._timeout_s
        )
        return int(wait_ms) / 1000

    async def give_back(self, keys: Sequence[str], *, event_id: str) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrem(self._key(key), event_id)
            await fail_closed(pipe.execute(), timeout_s=self._timeout_s)
