from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from services.gateway.users import MAX_PASSWORD_LENGTH
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
