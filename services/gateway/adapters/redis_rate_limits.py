"""Sliding-window rate limits in Redis: one sorted set of event times per bucket, checked and updated by
one Lua script, so replicas sharing the Redis never let more through than the limit. Times come
from Redis itself, so the replicas' clocks do not matter. Redis failing or slow is 503
session_store_unavailable, as for sessions: the gateway fails closed."""
from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio import Redis

from services.gateway.adapters.redis_base import RedisAdapter, fail_closed
from services.gateway.rate_limits import UNDER_WAY_AT_MOST_S, UNDER_WAY_WAIT_S, Bucket

# An event under way (a login whose password is being checked) is stored as "~" and its id until it is settled
# (a failure, kept) or given back (a success, forgotten).
_UNDER_WAY = "~"

# KEYS: the buckets. ARGV[1]: the event id; ARGV[2]: "1" to count it as under way; ARGV[3]: the wait (ms) while
# events under way fill a bucket; ARGV[4]: the age (ms) from which an event under way counts as settled; then
# events and window (ms) of each bucket in turn.
# Returns 0 after counting the event in every bucket, or the ms until all have room (nothing counted).
_TAKE = """
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local under_way_wait, settled_from = tonumber(ARGV[3]), now - tonumber(ARGV[4])

-- The ms until `leaving` of the bucket's events have left it, taking those under way to be decided within
-- under_way_wait: given back if they succeed; if they fail, the retry hears how long the failures hold.
local function wait_for(key, leaving, window)
  local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local settled = {}
  for j = 1, #entries, 2 do
    local score = tonumber(entries[j + 1])
    if string.sub(entries[j], 1, 1) ~= '~' or score <= settled_from then
      table.insert(settled, score)
    end
  end
  local under_way = #entries / 2 - #settled
  local oldest_leaving = tonumber(entries[2 * leaving]) + window - now
  if leaving <= under_way then
    return math.min(under_way_wait, oldest_leaving)
  end
  return settled[leaving - under_way] + window - now
end

local wait = 0
for i, key in ipairs(KEYS) do
  local events, window = tonumber(ARGV[2 * i + 3]), tonumber(ARGV[2 * i + 4])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  if count >= events then
    wait = math.max(wait, wait_for(key, count - events + 1, window))
  end
end
if wait > 0 then
  return wait
end
local member = ARGV[1]
if ARGV[2] == '1' then
  member = '~' .. member
end
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, member)
  redis.call('PEXPIRE', key, tonumber(ARGV[2 * i + 4]))
end
return 0
"""
# KEYS: the buckets. ARGV[1]: the event id. The event under way, if still counted, is kept as settled, at its time.
_SETTLE = """
for _, key in ipairs(KEYS) do
  local score = redis.call('ZSCORE', key, '~' .. ARGV[1])
  if score then
    redis.call('ZREM', key, '~' .. ARGV[1])
    redis.call('ZADD', key, score, ARGV[1])
  end
end
return 0
"""


class RedisRateLimiter(RedisAdapter):
    """Buckets as sorted sets under `{prefix}:ratelimit:{key}`, expiring with their window."""

    def __init__(self, redis: Redis, *, prefix: str, timeout_s: float) -> None:
        super().__init__(redis, prefix=prefix, timeout_s=timeout_s)
        self._take = redis.register_script(_TAKE)
        self._settle = redis.register_script(_SETTLE)

    def _key(self, key: str) -> str:
        return f"{self._prefix}:ratelimit:{key}"

    async def take(self, buckets: Sequence[Bucket], *, event_id: str, under_way: bool = False) -> float:
        args: list[str | int] = [
            event_id, "1" if under_way else "0", _ms(UNDER_WAY_WAIT_S), _ms(UNDER_WAY_AT_MOST_S)
        ]
        for bucket in buckets:
            args += [bucket.limit.events, _ms(bucket.limit.window_s)]
        wait_ms = await fail_closed(
            self._take(keys=[self._key(b.key) for b in buckets], args=args), timeout_s=self._timeout_s
        )
        return int(wait_ms) / 1000

    async def settle(self, keys: Sequence[str], *, event_id: str) -> None:
        keys = [self._key(key) for key in keys]
        await fail_closed(self._settle(keys=keys, args=[event_id]), timeout_s=self._timeout_s)

    async def give_back(self, keys: Sequence[str], *, event_id: str) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.zrem(self._key(key), event_id, _UNDER_WAY + event_id)
            await fail_closed(pipe.execute(), timeout_s=self._timeout_s)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
