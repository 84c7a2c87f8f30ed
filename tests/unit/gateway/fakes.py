from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from services.gateway.domain import Session, User
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
