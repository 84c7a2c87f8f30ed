"""What the gateway knows about people and their sessions."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta


def new_user_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class User:
    id: str
    username: str
    password_hash: str
    roles: tuple[str, ...]
    disabled: bool = False
    created_at: datetime | None = None
    # The fields of the stored record found missing or bad (services/gateway/user_record.py), by name
    problems: tuple[str, ...] = ()

    @property
    def may_log_in(self) -> bool:
        """Whether a login with the right password opens a session: not for a disabled user, nor for one
        whose record lacks the id a session is kept under."""
        return bool(self.id) and not self.disabled


@dataclass(frozen=True)
class Session:
    """A live login. `id` is the SHA-256 of the bearer token; the token itself is never stored.

    `public_id` is a separate random name for the session, shown to its user (GET /auth/sessions),
    used to end it (DELETE /auth/sessions/{public_id}) and passed to other services; it reveals
    nothing about the token or its digest.
    """

    id: str
    public_id: str
    user_id: str
    username: str
    roles: tuple[str, ...]
    created_at: datetime
    last_seen: datetime
    expires_at: datetime


@dataclass(frozen=True)
class SessionLifetime:
    """A session lives `idle_s` seconds after its last use (sliding), and never beyond `max_age_s` after login."""

    idle_s: int
    max_age_s: int

    def __post_init__(self) -> None:
        if self.idle_s <= 0 or self.max_age_s <= 0:
            raise ValueError(f"session lifetimes must be positive; got idle {self.idle_s}s, max age {self.max_age_s}s")

    def hard_limit(self, created_at: datetime) -> datetime:
        return created_at + timedelta(seconds=self.max_age_s)

    def expires_at(self, *, created_at: datetime, now: datetime) -> datetime:
        """When a session used at `now` expires if it is not used again."""
        return min(now + timedelta(seconds=self.idle_s), self.hard_limit(created_at))

    def is_over(self, *, created_at: datetime, now: datetime) -> bool:
        return now >= self.hard_limit(created_at)
