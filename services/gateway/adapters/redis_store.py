"""Users and sessions in Redis. Any Redis failure, or an operation slower than `timeout_s`, becomes
503 session_store_unavailable: the gateway fails closed, never open, and recovers when Redis answers again.

Keys, under the configured prefix:
  {prefix}:user:{username}          hash: the user record
  {prefix}:users                    set: every username
  {prefix}:session:{token sha256}   hash: public_id, user_id, username, roles, created_at, last_seen;
                                    expires with the session
  {prefix}:user-sessions:{user_id}  set: the token digests of the user's sessions; expires with the
                                    longest-lived of them, members of expired sessions are removed at the
                                    user's next login or listing of their sessions. One that holds another
                                    type (someone ran SET on it) is replaced, with a warning, when next used.
"""
from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from services.gateway.adapters.redis_base import RedisAdapter, bounded
from services.gateway.domain import Session, User, new_user_id
from services.gateway.session_record import DamagedSession, session_from_record, session_of_no_hash, unknown_roles_in
from services.gateway.session_record import record_fields as session_fields
from services.gateway.user_record import changed_fields, record_fields, user_from_no_hash, user_from_record

log = logging.getLogger(__name__)


def connect(url: str, *, timeout_s: float) -> Redis:
    return Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        # The asyncio client needs the asyncio Retry: the sync one hands back the command's coroutine
        # unawaited, so its retry never happens. One quick retry for a stale pooled connection, no more.
        retry=Retry(NoBackoff(), retries=1),
        health_check_interval=30,
    )


# KEYS: the set of usernames, a name's record. ARGV[1]: the name. Removes the name from the set if it has no record
# (a record deleted by hand): a name without a record is no user, and must not keep anyone from taking it.
# Returns 1 when it removed the name, else 0.
_DROP_STRAY_NAME = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
return redis.call('SREM', KEYS[1], ARGV[1])
"""
# KEYS: the set of usernames, the new user's hash. ARGV[1]: the username; then field, value pairs.
# Returns the name of a user whose name equals it in any case (nothing stored), or nil once stored.
# Usernames are ASCII, so string.lower compares them as str.casefold does.
_CREATE_USER = """
local folded = string.lower(ARGV[1])
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if string.lower(name) == folded then
    return name
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return ARGV[1]
end
redis.call('HSET', KEYS[2], unpack(ARGV, 2))
redis.call('SADD', KEYS[1], ARGV[1])
return false
"""
# KEYS[1]: the user's hash. ARGV[1]: an id for a damaged record that has none; ARGV[2]: the username; then field,
# value pairs. Returns the user's fields after the change, or nil (nothing stored) when there is no such user.
# A key that holds no hash (someone ran SET on it) has nothing to keep: a hash of the changed fields replaces it.
_UPDATE_USER = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then
  return false
elseif kind ~= 'hash' then
  redis.call('DEL', KEYS[1])
end
if (redis.call('HGET', KEYS[1], 'id') or '') == '' then
  redis.call('HSET', KEYS[1], 'id', ARGV[1])
end
redis.call('HSET', KEYS[1], 'username', ARGV[2], unpack(ARGV, 3))
return redis.call('HGETALL', KEYS[1])
"""
# KEYS: the set of usernames, the user's hash. ARGV: the username, the user's id ("" for a damaged record that has
# none). Deletes the user only if it still has that id, so a user added again under the name meanwhile stays. Returns 1 once deleted, else 0.
# A key that holds no hash (someone ran SET on it) has no id.
_DELETE_USER = """
local id = ''
if redis.call('TYPE', KEYS[2]).ok == 'hash' then
  id = redis.call('HGET', KEYS[2], 'id') or ''
end
if id ~= ARGV[2] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[1], ARGV[1])
return 1
"""

# KEYS[1]: a session's hash. ARGV: its roles as read, the known ones among them. Stores the known ones, unless the
# session ended or its roles changed since they were read (nothing written then). Returns 1 once stored, else 0.
_DROP_UNKNOWN_ROLES = """
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' or redis.call('HGET', KEYS[1], 'roles') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'roles', ARGV[2])
return 1
"""
# KEYS[1]: a user's index of sessions. Deletes it if it holds another type than a set, so that the next SADD makes
# a set in its place. Returns 1 when it deleted it, else 0 (a set, or no key: another gateway replaced it already).
_DROP_DAMAGED_INDEX = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'set' or kind == 'none' then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisUserStore(RedisAdapter):
    def __init__(self, redis: Redis, *, prefix: str, timeout_s: float) -> None:
        super().__init__(redis, prefix=prefix, timeout_s=timeout_s)
        self._create = redis.register_script(_CREATE_USER)
        self._update = redis.register_script(_UPDATE_USER)
        self._delete = redis.register_script(_DELETE_USER)
        self._drop_stray = redis.register_script(_DROP_STRAY_NAME)

    def _key(self, username: str) -> str:
        return f"{self._prefix}:user:{username}"

    @bounded
    async def get(self, username: str) -> User | None:
        try:
            fields = await self._redis.hgetall(self._key(username))
        except ResponseError as exc:
            return _user_from_reply(username, exc)
        return _user_from_reply(username, fields)

    @bounded
    async def create(self, user: User) -> str | None:
        folded = user.username.casefold()
        for name in await self._redis.smembers(f"{self._prefix}:users"):
            if name.casefold() == folded:
                await self._drop_stray_name(name)
        keys = [f"{self._prefix}:users", self._key(user.username)]
        return await self._create(keys=keys, args=[user.username, *_flat(record_fields(user))])

    @bounded
    async def drop_stray_name(self, username: str) -> bool:
        return await self._drop_stray_name(username)

    async def _drop_stray_name(self, username: str) -> bool:
        return bool(await self._drop_stray(keys=[f"{self._prefix}:users", self._key(username)], args=[username]))

    @bounded
    async def update(
        self,
        username: str,
        *,
        password_hash: str | None = None,
        roles: tuple[str, ...] | None = None,
        disabled: bool | None = None,
    ) -> User | None:
        changes = changed_fields(password_hash=password_hash, roles=roles, disabled=disabled)
        if not changes:
            raise ValueError("update: no field to change")
        reply = await self._update(keys=[self._key(username)], args=[new_user_id(), username, *_flat(changes)])
        return user_from_record(username, dict(zip(reply[::2], reply[1::2], strict=True))) if reply else None

    @bounded
    async def delete(self, user: User) -> bool:
        keys = [f"{self._prefix}:users", self._key(user.username)]
        return bool(await self._delete(keys=keys, args=[user.username, user.id]))

    @bounded
    async def list(self) -> list[User]:
        names = sorted(await self._redis.smembers(f"{self._prefix}:users"))
        async with self._redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self._key(name))
            records = await pipe.execute(raise_on_error=False)
        found = (_user_from_reply(name, reply) for name, reply in zip(names, records, strict=True))
        return [user for user in found if user is not None]


class RedisSessionStore(RedisAdapter):
    def __init__(self, redis: Redis, *, prefix: str, timeout_s: float) -> None:
        super().__init__(redis, prefix=prefix, timeout_s=timeout_s)
        self._drop_unknown_roles = redis.register_script(_DROP_UNKNOWN_ROLES)
        self._drop_damaged_index = redis.register_script(_DROP_DAMAGED_INDEX)

    def _key(self, session_id: str) -> str:
        return f"{self._prefix}:session:{session_id}"

    def _user_key(self, user_id: str) -> str:
        return f"{self._prefix}:user-sessions:{user_id}"

    @bounded
    async def create(self, session: Session, *, ttl_s: int) -> None:
        # Each login extends the set's expiry, so a user who logs in often and never lists their sessions
        # would otherwise keep every session id ever issued to them.
        await self._live_for_user(session.user_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(session.id), mapping=session_fields(session))
            pipe.expire(self._key(session.id), ttl_s)
            pipe.sadd(self._user_key(session.user_id), session.id)
            _outlive(pipe, self._user_key(session.user_id), ttl_s)
            await self._execute_on_index(pipe, session.user_id)

    @bounded
    async def get(self, session_id: str) -> Session | None:
        found = (await self._fetch([session_id]))[0]
        if isinstance(found, DamagedSession):
            await self._end_damaged([found], listed_under=found.user_id)
            return None
        return found

    @bounded
    async def touch(self, session: Session, *, seen_at: datetime, ttl_s: int) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(session.id), "last_seen", seen_at.isoformat())
            pipe.expire(self._key(session.id), ttl_s)
            _outlive(pipe, self._user_key(session.user_id), ttl_s)
            fields_added, *_ = await pipe.execute()
        if fields_added:  # the session ended meanwhile: drop the stray hash the write left behind
            await self._redis.delete(self._key(session.id))

    @bounded
    async def delete(self, session: Session) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(session.id))
            pipe.srem(self._user_key(session.user_id), session.id)
            await self._execute_on_index(pipe, session.user_id)

    @bounded
    async def list_for_user(self, user_id: str) -> list[Session]:
        return await self._live_for_user(user_id)

    @bounded
    async def delete_all_for_user(self, user_id: str) -> int:
        ids = list(await self._listed_for_user(user_id))
        if not ids:
            return 0
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(*(self._key(sid) for sid in ids))
            pipe.srem(self._user_key(user_id), *ids)  # not DEL: a session added meanwhile stays listed
            ended, _ = await self._execute_on_index(pipe, user_id)
        return ended

    async def _live_for_user(self, user_id: str) -> list[Session]:
        """The user's live sessions, oldest first; removes the ids of the others from the user's set."""
        ids = sorted(await self._listed_for_user(user_id))
        found = await self._fetch(ids)
        if gone := [sid for sid, session in zip(ids, found, strict=True) if session is None]:
            await self._redis.srem(self._user_key(user_id), *gone)
        # Ended here, as no token can use them, so that they are neither kept nor in the way of listing the others
        if damaged := [s for s in found if isinstance(s, DamagedSession)]:
            await self._end_damaged(damaged, listed_under=user_id)
        live = [s for s in found if isinstance(s, Session) and s.user_id == user_id]
        return sorted(live, key=lambda s: s.created_at)

    async def _end_damaged(self, damaged: list[DamagedSession], *, listed_under: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(*(self._key(d.id) for d in damaged))
            if listed_under:  # unknown for a record that is no hash: its id is dropped at the next listing
                pipe.srem(self._user_key(listed_under), *(d.id for d in damaged))
            await self._execute_on_index(pipe, listed_under)

    async def _listed_for_user(self, user_id: str) -> set[str]:
        """The token digests listed under the user; none, once it is replaced, for an index that is no set."""
        try:
            return await self._redis.smembers(self._user_key(user_id))
        except ResponseError as exc:
            if not _is_wrong_type(exc):
                raise
        await self._replace_damaged_index(user_id)
        return set()

    async def _execute_on_index(self, pipe: Any, user_id: str) -> list[Any]:
        """The replies of a pipeline that changes the user's index. An index that is no set fails only its own
        commands: it is replaced, and the others stand. Any other error raises."""
        replies = await pipe.execute(raise_on_error=False)
        if any(_is_wrong_type(reply) for reply in replies):
            await self._replace_damaged_index(user_id)
        if errors := [reply for reply in replies if isinstance(reply, Exception) and not _is_wrong_type(reply)]:
            raise errors[0]
        return replies

    async def _replace_damaged_index(self, user_id: str) -> None:
        # Only the gateway that deletes it warns: logged once however many requests find it at the same time
        if await self._drop_damaged_index(keys=[self._user_key(user_id)]):
            log.warning(
                "index of a user's sessions damaged (not a set): replaced; the sessions it listed are no longer "
                "ended with the user's other sessions and end when they expire",
                extra={"index": self._user_key(user_id)},
            )

    async def _drop_unknown_roles_from(self, repairs: list[tuple[Session, str]]) -> None:
        for session, stored in repairs:
            await self._drop_unknown_roles(keys=[self._key(session.id)], args=[stored, ",".join(session.roles)])

    async def _fetch(self, session_ids: list[str]) -> list[Session | DamagedSession | None]:
        async with self._redis.pipeline(transaction=False) as pipe:
            for sid in session_ids:
                pipe.hgetall(self._key(sid))
                pipe.ttl(self._key(sid))
            replies = await pipe.execute(raise_on_error=False)
        now = datetime.now(UTC)
        found = [
            _session_from_reply(sid, fields, ttl, now=now)
            for sid, fields, ttl in zip(session_ids, replies[::2], replies[1::2], strict=True)
        ]
        # Stored again without the unknown roles, so that they are reported once, not at each use of the session
        if repairs := [
            (session, fields["roles"])
            for session, fields in zip(found, replies[::2], strict=True)
            if isinstance(session, Session) and unknown_roles_in(fields)
        ]:
            await self._drop_unknown_roles_from(repairs)
        return found


def _outlive(pipe: Any, key: str, ttl_s: int) -> None:
    """Let `key` live at least `ttl_s` more seconds, never shortening it (EXPIRE NX, then GT: Redis 7)."""
    pipe.expire(key, ttl_s, nx=True)
    pipe.expire(key, ttl_s, gt=True)


def _hash_in(reply: dict[str, str] | Exception) -> dict[str, str] | None:
    """The fields of an HGETALL reply taken without raising; None when the key holds another type than a hash
    (someone ran SET on it). Any other error raises, as the Redis failure it is."""
    if _is_wrong_type(reply):
        return None
    if isinstance(reply, Exception):
        raise reply
    return reply


def _is_wrong_type(reply: Any) -> bool:
    """Whether a reply is Redis's refusal of a command on a key that holds another type."""
    return isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")


def _user_from_reply(username: str, reply: dict[str, str] | Exception) -> User | None:
    if (fields := _hash_in(reply)) is None:
        return user_from_no_hash(username)
    return user_from_record(username, fields) if fields else None


def _session_from_reply(
    session_id: str, reply: dict[str, str] | Exception, ttl: int | Exception, *, now: datetime
) -> Session | DamagedSession | None:
    if (fields := _hash_in(reply)) is None:
        return session_of_no_hash(session_id)
    if isinstance(ttl, Exception):
        raise ttl
    return session_from_record(session_id, fields, ttl=ttl, expires_at=now + timedelta(seconds=ttl))


def _flat(fields: dict[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]
