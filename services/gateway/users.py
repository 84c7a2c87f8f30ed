"""Managing users (used by `cairn user ...`): names, passwords and roles checked here, stored by a UserStore."""
from __future__ import annotations

import re
import uuid
from dataclasses import replace
from datetime import UTC, datetime

from services.gateway.domain import User
from services.gateway.passwords import hash_password
from services.gateway.roles import validate_roles
from services.gateway.stores import UserStore

_USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
MIN_PASSWORD_LENGTH = 8


class UserError(ValueError):
    """A user command that cannot be carried out as asked."""


def _check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"password must be at least {MIN_PASSWORD_LENGTH} characters")


async def add_user(*, users: UserStore, username: str, password: str, roles: list[str]) -> User:
    if not _USERNAME.match(username):
        raise UserError("username: 1-64 letters, digits or . _ @ -")
    if await users.get(username):
        raise UserError(f"user {username!r} already exists")
    _check_password(password)
    try:
        checked_roles = validate_roles(roles)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    user = User(
        id=uuid.uuid4().hex,
        username=username,
        password_hash=hash_password(password),
        roles=checked_roles,
        created_at=datetime.now(UTC),
    )
    await users.save(user)
    return user


async def set_password(*, users: UserStore, username: str, password: str) -> User:
    user = await users.get(username)
    if user is None:
        raise UserError(f"no user {username!r}")
    _check_password(password)
    updated = replace(user, password_hash=hash_password(password))
    await users.save(updated)
    return updated


async def ensure_user(*, users: UserStore, username: str, password: str, roles: list[str]) -> User:
    """Create the user, or give an existing one this password and these roles (for the demo user)."""
    existing = await users.get(username)
    if existing is None:
        return await add_user(users=users, username=username, password=password, roles=roles)
    _check_password(password)
    updated = replace(existing, password_hash=hash_password(password), roles=validate_roles(roles), disabled=False)
    await users.save(updated)
    return updated
