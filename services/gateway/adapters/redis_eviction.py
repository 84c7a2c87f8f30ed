"""A warning at start when Redis may evict the gateway's keys before they expire.

Sessions, rate-limit counts, the record of who asked which question and the index of a user's sessions
(which `cairn user disable` reads to end them) must live until they expire. Redis evicts keys only with
a memory limit and a policy other than noeviction, the default that some managed services change.
"""
from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)


async def warn_if_keys_may_be_evicted(redis: Redis) -> None:
    try:
        settings = await redis.config_get("maxmemory*")
    except (RedisError, OSError, TimeoutError):
        return  # CONFIG is often refused by managed services; a Redis that is down shows in /readyz
    policy, limit = settings.get("maxmemory-policy", "noeviction"), settings.get("maxmemory", "0")
    if policy != "noeviction" and str(limit) != "0":
        log.warning(
            "redis may evict keys before they expire: sessions, rate-limit counts and the sessions that "
            "`cairn user disable` ends can be lost; set maxmemory-policy to noeviction",
            extra={"maxmemory_policy": policy, "maxmemory": limit},
        )
