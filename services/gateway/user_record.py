"""How a user is stored as string fields, and how a stored record is read back: the one place that decides it.

A record may have been edited by hand or written by an older version. Reading never fails on it: a field that
is missing or bad is read as the safest value and named in `User.problems`, with a warning, so that the user's
logins are refused (or go on, when the password can still be checked) and an admin can see, repair or delete it.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

from services.gateway.domain import User
from services.gateway.passwords import is_password_hash
from services.gateway.roles import ROLES

log = logging.getLogger(__name__)


def record_fields(user: User) -> dict[str, str]:
    return {
        "id": user.id,
        "username": user.username,
        **changed_fields(password_hash=user.password_hash, roles=user.roles, disabled=user.disabled),
        "created_at": (user.created_at or datetime.now(UTC)).isoformat(),
    }


def changed_fields(*, password_hash: str | None, roles: tuple[str, ...] | None, disabled: bool | None) -> dict[str, str]:
    changes = {}
    if password_hash is not None:
        changes["password_hash"] = password_hash
    if roles is not None:
        changes["roles"] = ",".join(roles)
    if disabled is not None:
        changes["disabled"] = "1" if disabled else "0"
    return changes


def user_from_record(username: str, fields: dict[str, str]) -> User:
    """The user stored under `username` (the name its record is kept under, whatever its fields say)."""
    password_hash = fields.get("password_hash", "")
    user = User(
        id=fields.get("id", ""),
        username=username,
        password_hash=password_hash if is_password_hash(password_hash) else "",  # blank: no password opens it
        roles=known_roles(fields.get("roles", "")),
        disabled=fields.get("disabled", "0") != "0",  # refused for any value but "0": an operator may type "true"
        created_at=stored_moment(fields.get("created_at")),
    )
    if problems := _problems(user, fields):
        _warn(username, problems)
    return replace(user, problems=problems)


def user_from_no_hash(username: str) -> User:
    """The user whose key holds no hash (someone ran SET on it): nothing of it can be read, so it is read as a
    record that lacks every field, its one problem named `record`. Any change writes a hash in its place."""
    _warn(username, ("record",))
    return User(id="", username=username, password_hash="", roles=(), problems=("record",))


def _warn(username: str, problems: tuple[str, ...]) -> None:
    # Field names only: never a value, which for password_hash would be a secret.
    log.warning(
        "user record damaged: repair it with `cairn user` or /api/users, or delete it",
        extra={"username": username, "bad_fields": list(problems)},
    )


def _problems(user: User, fields: dict[str, str]) -> tuple[str, ...]:
    bad = {
        "id": not user.id,
        "username": fields.get("username") != user.username,
        "password_hash": not user.password_hash,
        "roles": not user.roles or set(user.roles) != set(fields.get("roles", "").split(",")),
        "disabled": fields.get("disabled", "0") not in ("0", "1"),
        "created_at": user.created_at is None and "created_at" in fields,  # none at all: stored before it was kept
    }
    return tuple(field for field, is_bad in bad.items() if is_bad)


def known_roles(stored: str) -> tuple[str, ...]:
    """The roles of a comma-separated list that Cairn knows, in rank order: an unknown one is never granted."""
    return tuple(sorted({r for r in stored.split(",") if r in ROLES}, key=ROLES.index))


def stored_moment(stored: str | None) -> datetime | None:
    """An ISO 8601 time as stored (one without a zone is UTC); None when it is missing or not such a time."""
    try:
        moment = datetime.fromisoformat(stored) if stored else None
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment and moment.tzinfo is None else moment
