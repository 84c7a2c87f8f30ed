from __future__ import annotations

from dataclasses import replace

from services.gateway.domain import Session, User


class FakeUserStore:
    def __init__(self) -> None:
        self.users: dict[str, User] = {}

    async def get(self, username: str) -> User | None:
        return self.users.get(username)

    async def save(self, user: User) -> None:
        self.users[user.username] = user

    async def list(self) -> list[User]:
        return sorted(self.users.values(), key=lambda u: u.username)


class FakeSessionStore:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.ttls: dict[str, int] = {}

    async def create(self, session: Session, *, ttl_s: int) -> None:
        self.sessions[session.id] = session
        self.ttls[session.id] = ttl_s

    async def get(self, session_id: str) -> Session | None:
        return self.sessions.get(session_id)

    async def touch(self, session: Session, *, ttl_s: int) -> None:
        self.sessions[session.id] = replace(session)
        self.ttls[session.id] = ttl_s

    async def delete(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)

    async def ping(self) -> bool:
        return True
