"""Conversations in Redis, for follow-up questions.

Each conversation is two keys that expire together, `conversation_ttl_s` after the last turn:
`{prefix}{id}:owner` (the user id of whoever appended first) and `{prefix}{id}:turns` (a list of
JSON exchanges in the order they finished, capped at the `max_turns` asked last, read back in the order
they were asked). The ownership check and the append run as one Lua script, so two users racing on a new id
cannot both own it. Any Redis failure or slowness becomes 503 conversation_store_unavailable.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import asdict
from typing import TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from services.chat.errors import ConversationNotFound
from services.chat.ports import Exchange
from services.chat.settings import Settings
from shared.errors import DependencyUnavailable

T = TypeVar("T")

DEPENDENCY = "conversation_store"

# KEYS: owner, turns. ARGV: user id, exchange JSON, ttl seconds, max turns.
# Returns 0 when another user owns the conversation, 1 after appending.
_APPEND_SCRIPT = """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then
  return 0
end
if not owner then
  redis.call('DEL', KEYS[2])  -- leftovers of an expired conversation are not the new owner's
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[2])
-- Over the cap, drop the turns asked first (not the ones that finished first), as history() reads them.
local turns = redis.call('LRANGE', KEYS[2], 0, -1)
for _ = 1, #turns - tonumber(ARGV[4]) do
  local oldest, oldest_at = 1, nil
  for i, turn in ipairs(turns) do
    local asked_at = cjson.decode(turn)['asked_at'] or 0
    if oldest_at == nil or asked_at < oldest_at then
      oldest, oldest_at = i, asked_at
    end
  end
  redis.call('LREM', KEYS[2], 1, turns[oldest])
  table.remove(turns, oldest)
end
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 1
"""


class RedisConversationStore:
    """A services.chat.ports.ConversationStore on Redis."""

    def __init__(
        self,
        client: Redis,
        *,
        ttl_s: int,
        max_turns: int,
        key_prefix: str = "cairn:conversation:",
        timeout_s: float | None = None,
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive, got {ttl_s}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self._redis = client
        self._ttl_s = ttl_s
        self._max_turns = max_turns
        self._prefix = key_prefix
        self._timeout_s = timeout_s  # a deadline for a whole call, retries included
        self._append = client.register_script(_APPEND_SCRIPT)

    def owner_key(self, conversation_id: str) -> str:
        return f"{self._prefix}{conversation_id}:owner"

    def turns_key(self, conversation_id: str) -> str:
        return f"{self._prefix}{conversation_id}:turns"

    async def history(self, *, conversation_id: str, user_id: str) -> list[Exchange]:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.get(self.owner_key(conversation_id))
            pipe.lrange(self.turns_key(conversation_id), 0, -1)
            owner, turns = await self._call(pipe.execute())
        if owner is None:
            return []
        if _text(owner) != user_id:
            raise ConversationNotFound(conversation_id)
        return sorted((_exchange_from(turn) for turn in turns), key=lambda exchange: exchange.asked_at)

    async def append(self, *, conversation_id: str, user_id: str, exchange: Exchange) -> None:
        keys = [self.owner_key(conversation_id), self.turns_key(conversation_id)]
        args = [user_id, json.dumps(asdict(exchange), ensure_ascii=False), self._ttl_s, self._max_turns]
        if not await self._call(self._append(keys=keys, args=args)):
            raise ConversationNotFound(conversation_id)

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self._redis.ping()))
        except DependencyUnavailable:
            return False

    async def aclose(self) -> None:
        await self._redis.aclose()

    async def _call(self, operation: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout_s):  # None: no limit
                return await operation
        except (RedisError, OSError, TimeoutError) as exc:
            raise DependencyUnavailable(DEPENDENCY, "the conversation store (Redis) is unavailable") from exc


def open_conversation_store(settings: Settings) -> RedisConversationStore:
    """A store on a new client; the client connects on first use, so this is safe outside the lifespan."""
    client = Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_timeout=settings.redis_timeout_s,
        socket_connect_timeout=settings.redis_timeout_s,
        retry=Retry(NoBackoff(), retries=1),  # one quick retry for a stale pooled connection, no more
        health_check_interval=30,
    )
    return RedisConversationStore(
        client,
        ttl_s=settings.conversation_ttl_s,
        max_turns=settings.conversation_max_turns,
        key_prefix=f"{settings.redis_prefix}:conversation:",
        timeout_s=settings.redis_timeout_s,
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _exchange_from(raw: str | bytes) -> Exchange:
    fields = json.loads(raw)
    return Exchange(
        question=fields["question"], standalone=fields["standalone"], answer=fields["answer"],
        asked_at=fields.get("asked_at", 0.0),
    )
