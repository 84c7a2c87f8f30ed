"""How a session is stored as string fields, and how a stored record is read back: the one place that decides it.

A session record edited by hand can lack a field, hold a bad value, be no hash at all or never expire. Reading never
fails on it: a record that cannot be read safely is no session (its token gets the 401 of an unknown one) and is to
be ended, with one warning naming the bad fields, never the token, its digest or a value. Unknown roles are left out
and the session goes on: its record is to be stored again without them, so that they are reported once.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from services.gateway.domain import Session
from services.gateway.user_record import known_roles, stored_moment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DamagedSession:
    """A session record that cannot be read safely: no session, to be deleted. `user_id` is "" when unknown."""

    id: str
    user_id: str


def record_fields(session: Session) -> dict[str, str]:
    return {
        "public_id": session.public_id,
        "user_id": session.user_id,
        "username": session.username,
        "roles": ",".join(session.roles),
        "created_at": session.created_at.isoformat(),
        "last_seen": session.last_seen.isoformat(),
    }


def session_from_record(
    session_id: str, fields: dict[str, str], *, ttl: int, expires_at: datetime
) -> Session | DamagedSession | None:
    """The session stored under the token digest `session_id` with `ttl` seconds to live (-1: no expiry, -2: no
    key); None when there is none, DamagedSession (after a warning) when its record cannot be read safely."""
    if ttl == -2 or not fields:  # gone, perhaps expired between the reads of its fields and of its TTL
        return None
    # The gateway always stores a session with its expiry, which alone enforces the idle lifetime: one kept for
    # ever (someone ran PERSIST on it) could be used after any time idle.
    never_expires = ttl == -1
    # A hash without these is not a live session: a stray `last_seen` write racing a logout, or a session stored
    # by an older gateway (no public id, not listed under its user): log in again. Both expire by themselves.
    if not never_expires and ("user_id" not in fields or "public_id" not in fields):
        return None
    public_id, user_id, username = fields.get("public_id", ""), fields.get("user_id", ""), fields.get("username", "")
    created_at, last_seen = stored_moment(fields.get("created_at")), stored_moment(fields.get("last_seen"))
    roles = known_roles(fields.get("roles", ""))
    bad = {
        "user_id": not user_id,
        "username": not username,
        "roles": unknown_roles_in(fields),  # left out, never granted
        "created_at": created_at is None,
        "last_seen": last_seen is None,
        "expiry": never_expires,
    }
    problems = tuple(field for field, is_bad in bad.items() if is_bad)
    if problems == ("roles",):
        _warn_unknown_roles(public_id)
    elif problems:
        _warn(public_id, problems)
    if created_at is None or last_seen is None or set(problems) - {"roles"}:
        return DamagedSession(session_id, user_id)
    return Session(
        id=session_id,
        public_id=public_id,
        user_id=user_id,
        username=username,
        roles=roles,
        created_at=created_at,
        last_seen=last_seen,
        expires_at=expires_at,
    )


def unknown_roles_in(fields: dict[str, str]) -> bool:
    """Whether the stored roles name one that Cairn does not know, which is then to be dropped from the record."""
    return set(known_roles(fields.get("roles", ""))) != {r for r in fields.get("roles", "").split(",") if r}


def session_of_no_hash(session_id: str) -> DamagedSession:
    """The session whose key holds no hash (someone ran SET on it), its one problem named `record`."""
    _warn("", ("record",))
    return DamagedSession(session_id, user_id="")


def _warn(public_id: str, problems: tuple[str, ...]) -> None:
    # The public id names the session without revealing its token; the digest would be a key to it in Redis.
    log.warning(
        "session record damaged: its token is refused, the user logs in again",
        extra={"session": public_id, "bad_fields": list(problems)},
    )


def _warn_unknown_roles(public_id: str) -> None:
    log.warning(
        "session record names a role Cairn does not know: the role is dropped from it, the session goes on",
        extra={"session": public_id, "bad_fields": ["roles"]},
    )
