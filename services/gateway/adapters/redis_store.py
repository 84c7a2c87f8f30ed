"""Users and sessions in Redis. Any Redis failure or slowness becomes 503 session_store_unavailable:
the gateway fails closed, never open."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from services.gateway.domain import Session, User
from shared.errors import DependencyUnavailable

T = TypeVar("T")


def connect(url: str, *, timeout_s: float) -> Redis:
    return Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), retries=1),  # one quick retry for a stale pooled connection, no more
        health_check_interval=30,
    )


class _RedisAdapter:
    def __init__(self, redis: Redis, *, prefix: str, timeout_s: float) -> None:
        self._redis = redis
        self._prefix = prefix
        self._timeout_s = timeout_s

    async def _call(self, operation: Awaitable[T]) -> T:
        try:
            return await asyncio.wait_for(operation, self._timeout_s)
        except (RedisError, OSError, TimeoutError) as exc:
            raise DependencyUnavailable("session_store", "the session store (Redis) is unavailable") from exc

    async def ping(self) -> bool:
        try:
            return bool(await self._call(self._redis.ping()))
        except DependencyUnavailable:
            return False


class RedisUserStore(_RedisAdapter):
    """Users as hashes under `{prefix}:user:{username}`, names indexed in the set `{prefix}:users`."""

    def _key(self, username: str) -> str:
        return f"{self._prefix}:user:{username}"

    async def get(self, username: str) -> User | None:
        fields = await self._call(self._redis.hgetall(self._key(username)))
        return _user_from(fields) if fields else None

    async def save(self, user: User) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(user.username), mapping=_user_fields(user))
            pipe.sadd(f"{self._prefix}:users", user.username)
            await self._call(pipe.execute())

    async def list(self) -> list[User]:
        names = sorted(await self._call(self._redis.smembers(f"{self._prefix}:users")))
        users = [await self.get(name) for name in names]
        return [u for u in users if u]


class RedisSessionStore(_RedisAdapter):
    """Sessions as hashes under `{prefix}:session:{sha256 of token}`, expiring with the session."""

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}:session:{session_id}"

    async def create(self, session: Session, *, ttl_s: int) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(session.id), mapping=_session_fields(session))
            pipe.expire(self._key(session.id), ttl_s)
            await self._call(pipe.execute())

    async def get(self, session_id: str) -> Session | None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(self._key(session_id))
            pipe.ttl(self._key(session_id))
            fields, ttl = await self._call(pipe.execute())
        if "user_id" not in fields or ttl < 0:  # gone, or only a touch of a just-deleted session
            return None
        return _session_from(session_id, fields, expires_at=datetime.now(UTC) + timedelta(seconds=ttl))

    async def touch(self, session: Session, *, ttl_s: int) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(session.id), "last_seen", datetime.now(UTC).isoformat())
            pipe.expire(self._key(session.id), ttl_s)
            await self._call(pipe.execute())

    async def delete(self, session_id: str) -> None:
        await self._call(self._redis.delete(self._key(session_id)))


def _user_fields(user: User) -> dict[str, str]:
    return {
        "id": user.id,
        "username": user.username,
        "password_hash": user.password_hash,
        "roles": ",".join(user.roles),
        "disabled": "1" if user.disabled else "0",
        "created_at": (user.created_at or datetime.now(UTC)).isoformat(),
    }


def _user_from(fields: dict[str, str]) -> User:
    return User(
        id=fields["id"],
        username=fields["username"],
        password_hash=fields["password_hash"],
        roles=tuple(r for r in fields.get("roles", "").split(",") if r),
        disabled=fields.get("disabled") == "1",
        created_at=datetime.fromisoformat(fields["created_at"]) if fields.get("created_at") else None,
    )


def _session_fields(session: Session) -> dict[str, str]:
    return {
        "user_id": session.user_id,
        "username": session.username,
        "roles": ",".join(session.roles),
        "created_at": session.created_at.isoformat(),
        "last_seen": (session.last_seen or session.created_at).isoformat(),
    }


def _session_from(session_id: str, fields: dict[str, str], *, expires_at: datetime) -> Session:
    return Session(
        id=session_id,
        user_id=fields["user_id"],
        username=fields["username"],
        roles=tuple(r for r in fields.get("roles", "").split(",") if r),
        created_at=datetime.fromisoformat(fields["created_at"]),
        last_seen=datetime.fromisoformat(fields["last_seen"]),
        expires_at=expires_at,
    )
