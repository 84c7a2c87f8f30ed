"""Managing users (`cairn user ...` and an admin's /api/users): names, passwords and roles checked here,
stored by a UserStore.

A change that takes rights away or may answer a leaked password ends the user's sessions at once:
disabling, deleting, changing roles (a session carries the roles it was opened with) and resetting the password.
The user logs in again and gets a session with what the user record now says.
"""
from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from services.gateway.domain import User, new_user_id
from services.gateway.passwords import hash_password
from services.gateway.roles import grants, validate_roles
from services.gateway.stores import SessionStore, UserStore

_USERNAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")  # fullmatch: "$" would let a final newline through
MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024  # what POST /auth/login takes: a longer password could never be used


class UserError(ValueError):
    """A user command that cannot be carried out as asked."""


class UnknownUser(UserError):
    def __init__(self, username: str) -> None:
        super().__init__(f"no user {username!r}")


class UserExists(UserError):
    """The name is taken, as typed or in another case."""


class OwnAccount(UserError):
    """An admin's change that would lock the admin out of the very account making it."""


@dataclass(frozen=True)
class UserChange:
    user: User
    sessions_ended: int


def check_password(password: str) -> None:
    """Raises UserError for a password no user may have."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise UserError(f"password must be at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise UserError(f"password must be at most {MAX_PASSWORD_LENGTH} characters")


def _checked_roles(roles: list[str]) -> tuple[str, ...]:
    try:
        return validate_roles(roles)
    except ValueError as exc:
        raise UserError(str(exc)) from exc


async def _existing(users: UserStore, username: str) -> User:
    user = await users.get(username)
    if user is None:
        raise UnknownUser(username)
    return user


async def find_user(*, users: UserStore, username: str) -> User:
    """The user named exactly `username`; UnknownUser when there is none."""
    return await _existing(users, username)


async def check_user_exists(*, users: UserStore, username: str) -> None:
    """Raises UserError unless the user exists: a command can say so before it asks for a password."""
    await _existing(users, username)


async def check_new_username(*, users: UserStore, username: str) -> None:
    """Raises UserError unless `username` is a valid name no user has, in any case."""
    if not _USERNAME.fullmatch(username):
        raise UserError("username: 1-64 ASCII letters, digits or . _ @ -")
    if await users.get(username):
        raise UserExists(_taken(username, username))
    # Names are kept as typed, but "Admin" beside "admin" would pass for one user to people reading them
    # (and failed logins are counted per name without case, so one would lock the other out).
    if alike := [u.username for u in await users.list() if u.username.casefold() == username.casefold()]:
        raise UserExists(_taken(alike[0], username))


def _taken(existing: str, username: str) -> str:
    if existing == username:
        return f"user {username!r} already exists"
    return f"user {existing!r} already exists; names that differ only in case are not allowed"


async def add_user(*, users: UserStore, username: str, password: str, roles: list[str]) -> User:
    await check_new_username(users=users, username=username)
    check_password(password)
    user = User(
        id=new_user_id(),
        username=username,
        password_hash=await _hashed(password),
        roles=_checked_roles(roles),
        created_at=datetime.now(UTC),
    )
    # Checked again in the same step as the store: another add may have taken the name meanwhile.
    if taken := await users.create(user):
        raise UserExists(_taken(taken, username))
    return user


async def _updated(users: UserStore, username: str, **changes) -> User:
    # Only the changed fields are written: a command changing another field at once keeps its change.
    user = await users.update(username, **changes)
    if user is None:
        raise UnknownUser(username)
    return user


async def _hashed(password: str) -> str:
    # A hash takes a fifth of a second of CPU on purpose: off the event loop, where the gateway calls this.
    return await asyncio.to_thread(hash_password, password)


async def set_password(*, users: UserStore, username: str, password: str) -> User:
    check_password(password)
    return await _updated(users, username, password_hash=await _hashed(password))


async def _change_then_end_sessions(users: UserStore, sessions: SessionStore, username: str, **changes) -> UserChange:
    # Change first, end sessions second: a login racing this re-reads the user after storing its
    # session (see auth.login), so no session opened under the old record survives.
    updated = await _updated(users, username, **changes)
    return UserChange(updated, await sessions.delete_all_for_user(updated.id))


async def reset_password(*, users: UserStore, sessions: SessionStore, username: str, password: str) -> UserChange:
    await _existing(users, username)  # an unknown name is the error to give, not a short password
    check_password(password)
    return await _change_then_end_sessions(users, sessions, username, password_hash=await _hashed(password))


async def disable_user(*, users: UserStore, sessions: SessionStore, username: str) -> UserChange:
    """Refuse the user's logins and end its sessions; running it again ends any session left over."""
    return await _change_then_end_sessions(users, sessions, username, disabled=True)


async def enable_user(*, users: UserStore, username: str) -> User:
    return await _updated(users, username, disabled=False)


async def set_roles(*, users: UserStore, sessions: SessionStore, username: str, roles: list[str]) -> UserChange:
    """Replace the user's roles and end its sessions, which still carry the old ones."""
    return await _change_then_end_sessions(users, sessions, username, roles=_checked_roles(roles))


async def change_user(
    *, users: UserStore, sessions: SessionStore, username: str, roles: list[str] | None, disabled: bool | None
) -> UserChange:
    """Set the user's roles, whether it is disabled, or both, in one step. The user's sessions end unless the
    change only enables it: a disabled user has none, and a session carries the roles it was opened with."""
    if roles is None and disabled is None:
        raise UserError("nothing to change: give roles, disabled or both")
    checked = None if roles is None else _checked_roles(roles)
    if checked is None and disabled is False:
        return UserChange(await enable_user(users=users, username=username), sessions_ended=0)
    return await _change_then_end_sessions(users, sessions, username, roles=checked, disabled=disabled)


async def delete_user(
    *, users: UserStore, sessions: SessionStore, username: str, caller_id: str | None = None
) -> UserChange:
    """Delete the user and end its sessions: the name is free to add again, for a new user with a new id, so
    nothing kept under the old id (conversations, ratings, analytics) passes to it. `caller_id`: the admin
    asking, who may not delete its own account (check_own_delete).

    A name left among the users without its record (deleted by hand) is no user: it is forgotten, and the answer
    is UnknownUser, as for any name that is no user's."""
    user = await users.get(username)
    if user is None:
        await users.drop_stray_name(username)
        raise UnknownUser(username)
    if caller_id is not None:
        check_own_delete(caller_id=caller_id, user=user)
    # Deleted first, sessions ended second, as _change_then_end_sessions does for a racing login.
    if not await users.delete(user):
        raise UnknownUser(username)  # deleted meanwhile, or deleted and added again: this user is gone
    return UserChange(user, await sessions.delete_all_for_user(user.id))


def check_own_delete(*, caller_id: str, user: User) -> None:
    """Raises OwnAccount for an admin deleting its own account, which it could not undo."""
    if user.id == caller_id:
        raise OwnAccount("you cannot delete your own account; another admin can, or `cairn user delete`")


def check_own_change(*, caller_id: str, user: User, roles: list[str] | None, disabled: bool | None) -> None:
    """Raises OwnAccount for an admin disabling, or taking the admin role from, its own account: the change
    would end the admin's session and leave it unable to undo it (another admin, or `cairn user`, can)."""
    if user.id != caller_id:
        return
    if disabled:
        raise OwnAccount("you cannot disable your own account; another admin can, or `cairn user disable`")
    if roles is not None and not grants(tuple(roles), "admin"):
        raise OwnAccount(
            "you cannot take the admin role from your own account; another admin can, or `cairn user set-role`"
        )


async def ensure_user(*, users: UserStore, username: str, password: str, roles: list[str]) -> User:
    """The user, created with this password and these roles if it does not exist (the demo user). An existing
    one is left as its administrators made it: disabled, with other roles or another password."""
    existing = await users.get(username)
    if existing is None:
        try:
            return await add_user(users=users, username=username, password=password, roles=roles)
        except UserError:
            # Another `cairn up` created it meanwhile: that user is the one to keep.
            if (existing := await users.get(username)) is None:
                raise
    return existing
