from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from services.gateway import rate_limits
from services.gateway.domain import Session, User
from services.gateway.rate_limits import Bucket
from shared.errors import DependencyUnavailable


class FakeUserStore:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}

    async def get(self, username: str) -> User | None:
        return self.users.get(username)

    async def create(self, user: User) -> str | None:
        if alike := [name for name in self.users if name.casefold() == user.username.casefold()]:
            return alike[0]
        self.users[user.username] = user
        return None

    async def update(self, username: str, **changes) -> User | None:
        if username not in self.users:
            return None
        self.users[username] = replace(self.users[username], **{k: v for k, v in changes.items() if v is not None})
        return self.users[username]

    async def delete(self, user: User) -> bool:
        if (stored := self.users.get(user.username)) is None or stored.id != user.id:
            return False
        del self.users[user.username]
        return True

    async def drop_stray_name(self, username: str) -> bool:
        return False  # every name here has its record

    async def list(self) -> list[User]:
        return sorted(self.users.values(), key=lambda u: u.username)


class FakeSessionStore:
    """Sessions in dicts; `ttls` records the last expiry asked for, `expire()` makes one lapse,
    and `down = True` makes every call fail as an unreachable Redis does."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.ttls: dict[str, int] = {}
        self.by_user: dict[str, set[str]] = {}
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise DependencyUnavailable("session_store", "the session store (Redis) is unavailable")

    def expire(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)  # as Redis does: the user index keeps the id until cleaned

    async def create(self, session: Session, *, ttl_s: int) -> None:
        self._check()
        self.sessions[session.id] = session
        self.ttls[session.id] = ttl_s
        self.by_user.setdefault(session.user_id, set()).add(session.id)

    async def get(self, session_id: str) -> Session | None:
        self._check()
        return self.sessions.get(session_id)

    async def touch(self, session: Session, *, seen_at: datetime, ttl_s: int) -> None:
        self._check()
        if session.id in self.sessions:
            self.sessions[session.id] = replace(self.sessions[session.id], last_seen=seen_at)
            self.ttls[session.id] = ttl_s

    async def delete(self, session: Session) -> None:
        self._check()
        self.sessions.pop(session.id, None)
        self.by_user.get(session.user_id, set()).discard(session.id)

    async def list_for_user(self, user_id: str) -> list[Session]:
        self._check()
        ids = self.by_user.setdefault(user_id, set())
        ids.intersection_update(self.sessions)  # forget expired ones, as the Redis store does
        return sorted((self.sessions[i] for i in ids), key=lambda s: s.created_at)

    async def delete_all_for_user(self, user_id: str) -> int:
        self._check()
        ids = self.by_user.pop(user_id, set()).intersection(self.sessions)
        for session_id in ids:
            del self.sessions[session_id]
        return len(ids)

    async def ping(self) -> bool:
        return not self.down


class FakeRateLimiter:
    """The sliding window of the Redis adapter, in memory, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.events: dict[str, dict[str, float]] = {}
        self.under_way: set[str] = set()

    async def take(self, buckets: Sequence[Bucket], *, event_id: str, under_way: bool = False) -> float:
        wait = 0.0
        for bucket in buckets:
            times = self.events.setdefault(bucket.key, {})
            for old, at in list(times.items()):
                if at <= self.now - bucket.limit.window_s:
                    del times[old]
            if len(times) >= bucket.limit.events:
                wait = max(wait, self._wait(times, len(times) - bucket.limit.events + 1, bucket.limit.window_s))
        if wait > 0:
            return wait
        for bucket in buckets:
            self.events[bucket.key][event_id] = self.now
        if under_way:
            self.under_way.add(event_id)
        return 0.0

    def _wait(self, times: dict[str, float], leaving: int, window_s: float) -> float:
        settled_from = self.now - rate_limits.UNDER_WAY_AT_MOST_S
        settled = sorted(at for event, at in times.items() if event not in self.under_way or at <= settled_from)
        under_way = len(times) - len(settled)
        oldest_leaving = sorted(times.values())[leaving - 1] + window_s - self.now
        if leaving <= under_way:
            return min(rate_limits.UNDER_WAY_WAIT_S, oldest_leaving)
        return settled[leaving - under_way - 1] + window_s - self.now

    async def settle(self, keys: Sequence[str], *, event_id: str) -> None:
        self.under_way.discard(event_id)

    async def give_back(self, keys: Sequence[str], *, event_id: str) -> None:
        for key in keys:
            self.events.get(key, {}).pop(event_id, None)
        self.under_way.discard(event_id)
