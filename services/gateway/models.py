from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from services.gateway.domain import User
from services.gateway.users import MAX_PASSWORD_LENGTH
from shared.json_types import JsonBool
from shared.request_model import RequestModel


class LoginRequest(RequestModel):
    username: str = Field(min_length=1, max_length=64)
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)


class UserOut(BaseModel):
    id: str
    username: str
    roles: list[str]


class LoginResponse(BaseModel):
    token: str
    token_type: str = "bearer"
    expires_at: datetime
    user: UserOut


class MeResponse(BaseModel):
    user: UserOut
    session_created_at: datetime
    expires_at: datetime


class SessionOut(BaseModel):
    id: str = Field(description="The session's public id: use it to end the session; unrelated to the token")
    created_at: datetime
    last_seen: datetime
    expires_at: datetime
    current: bool = Field(description="True for the session making this request")


class SessionsResponse(BaseModel):
    sessions: list[SessionOut]


class UserRecord(BaseModel):
    """A user as an admin sees it: never its password hash."""

    id: str
    username: str
    roles: list[str]
    disabled: bool
    created_at: datetime | None = Field(description="Null for users stored before Cairn recorded it")
    problems: list[str] = Field(
        description="The fields of the stored record found missing or bad (edited by hand, or by an older version): "
        "empty for a sound record"
    )

    @classmethod
    def of(cls, user: User) -> UserRecord:
        return cls(
            id=user.id, username=user.username, roles=list(user.roles), disabled=user.disabled,
            created_at=user.created_at, problems=list(user.problems),
        )


class UsersResponse(BaseModel):
    users: list[UserRecord] = Field(description="Every user, by name")


class NewUserRequest(RequestModel):
    username: str = Field(min_length=1, max_length=64, description="1-64 ASCII letters, digits or . _ @ -")
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH, description="8 to 1024 characters")
    roles: list[str] = Field(min_length=1, max_length=3, description="Some of user, analyst and admin")


class UserChangeRequest(RequestModel):
    roles: list[str] | None = Field(None, min_length=1, max_length=3, description="The user's new roles, all of them")
    disabled: JsonBool | None = Field(None, description="true refuses the user's logins; false lets it log in again")


class PasswordRequest(RequestModel):
    password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH, description="8 to 1024 characters")


class UserChanged(BaseModel):
    user: UserRecord
    sessions_ended: int = Field(description="The user's sessions the change ended")


class PasswordChangeRequest(RequestModel):
    current_password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH)
    new_password: str = Field(min_length=1, max_length=MAX_PASSWORD_LENGTH, description="8 to 1024 characters")


class PasswordChanged(BaseModel):
    sessions_ended: int = Field(description="The caller's other sessions, ended by the change")
