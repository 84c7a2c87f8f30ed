"""`/api/users`: an admin adds users, changes their roles, disables or deletes them and resets their passwords.

The same changes as `cairn user ...`, through the gateway: a change that takes rights away or resets the
password ends the user's sessions at once (services/gateway/users.py says why).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import APIRouter

from services.gateway import users
from services.gateway.deps import AdminSession, SessionsDep, UsersDep
from services.gateway.models import (
    NewUserRequest,
    PasswordRequest,
    UserChanged,
    UserChangeRequest,
    UserRecord,
    UsersResponse,
)
from services.gateway.responses import A_USER, NEW_USER, PASSWORD_RESET, USER_CHANGE, USER_DELETE, USERS
from shared.errors import NotFound, ServiceError
from shared.json_body import StrictJsonRoute

router = APIRouter(route_class=StrictJsonRoute, prefix="/api/users", tags=["users"])


@contextmanager
def _refused_as_http() -> Iterator[None]:
    try:
        yield
    except users.UnknownUser as exc:
        raise NotFound(str(exc)) from exc
    except users.UserExists as exc:
        raise ServiceError(str(exc), code="user_exists", status_code=409) from exc
    except users.OwnAccount as exc:
        raise ServiceError(str(exc), code="own_account", status_code=409) from exc
    except users.UserError as exc:  # an invalid name, password or role: as an invalid body is answered
        raise ServiceError(str(exc), code="invalid_request", status_code=422) from exc


@router.get("", response_model=UsersResponse, responses=USERS)
async def list_users(_: AdminSession, store: UsersDep) -> UsersResponse:
    """Every user with its roles and whether it is disabled."""
    return UsersResponse(users=[UserRecord.of(user) for user in await store.list()])


@router.post("", status_code=201, response_model=UserRecord, responses=NEW_USER)
async def add_user(body: NewUserRequest, _: AdminSession, store: UsersDep) -> UserRecord:
    """Add a user, who may log in at once."""
    with _refused_as_http():
        user = await users.add_user(users=store, username=body.username, password=body.password, roles=body.roles)
    return UserRecord.of(user)


@router.get("/{username}", response_model=UserRecord, responses=A_USER)
async def get_user(username: str, _: AdminSession, store: UsersDep) -> UserRecord:
    with _refused_as_http():
        return UserRecord.of(await users.find_user(users=store, username=username))


@router.patch("/{username}", response_model=UserChanged, responses=USER_CHANGE)
async def change_user(
    username: str, body: UserChangeRequest, admin: AdminSession, store: UsersDep, sessions: SessionsDep
) -> UserChanged:
    """Replace the user's roles, disable it or enable it again. Any change but enabling ends its sessions."""
    with _refused_as_http():
        user = await users.find_user(users=store, username=username)
        users.check_own_change(caller_id=admin.user_id, user=user, roles=body.roles, disabled=body.disabled)
        change = await users.change_user(
            users=store, sessions=sessions, username=username, roles=body.roles, disabled=body.disabled
        )
    return UserChanged(user=UserRecord.of(change.user), sessions_ended=change.sessions_ended)


@router.put("/{username}/password", response_model=UserChanged, responses=PASSWORD_RESET)
async def reset_password(
    username: str, body: PasswordRequest, _: AdminSession, store: UsersDep, sessions: SessionsDep
) -> UserChanged:
    """Set a new password for the user and end its sessions."""
    with _refused_as_http():
        change = await users.reset_password(users=store, sessions=sessions, username=username, password=body.password)
    return UserChanged(user=UserRecord.of(change.user), sessions_ended=change.sessions_ended)


@router.delete("/{username}", response_model=UserChanged, responses=USER_DELETE)
async def delete_user(username: str, admin: AdminSession, store: UsersDep, sessions: SessionsDep) -> UserChanged:
    """Delete the user and end its sessions; the record deleted is returned. The name may be added again, as a
    new user."""
    with _refused_as_http():
        change = await users.delete_user(users=store, sessions=sessions, username=username, caller_id=admin.user_id)
    return UserChanged(user=UserRecord.of(change.user), sessions_ended=change.sessions_ended)
