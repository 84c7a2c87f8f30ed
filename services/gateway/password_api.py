"""`POST /auth/password`: a signed-in user changes its own password, giving the current one."""
from __future__ import annotations

from fastapi import APIRouter

from services.gateway import auth, rate_limits
from services.gateway.deps import (
    ClientAddress,
    CurrentSession,
    LoginLimitsDep,
    RateLimiterDep,
    SessionsDep,
    UsersDep,
)
from services.gateway.models import PasswordChanged, PasswordChangeRequest
from services.gateway.responses import OWN_PASSWORD
from services.gateway.users import UserError, check_password
from shared.errors import DependencyUnavailable, ServiceError
from shared.json_body import StrictJsonRoute

router = APIRouter(route_class=StrictJsonRoute, prefix="/auth", tags=["auth"])


@router.post("/password", response_model=PasswordChanged, responses=OWN_PASSWORD)
async def change_password(
    body: PasswordChangeRequest,
    session: CurrentSession,
    users: UsersDep,
    sessions: SessionsDep,
    limiter: RateLimiterDep,
    limits: LoginLimitsDep,
    address: ClientAddress,
) -> PasswordChanged:
    """Set a new password, giving the current one; the caller's other sessions end, this one stays."""
    try:
        check_password(body.new_password)
    except UserError as exc:
        raise ServiceError(f"new_password: {exc}", code="invalid_request", status_code=422) from exc
    # A wrong current password counts as a failed login of the user: a stolen token is no way around the limit.
    attempt = await rate_limits.start_login(limiter=limiter, limits=limits, username=session.username, address=address)
    try:
        await auth.check_own_password(users=users, caller=session, password=body.current_password)
    except DependencyUnavailable:
        await rate_limits.login_cut_short(limiter=limiter, attempt=attempt)
        raise
    except auth.WrongPassword:
        await rate_limits.login_failed(limiter=limiter, attempt=attempt)
        raise
    await rate_limits.login_succeeded(limiter=limiter, attempt=attempt)
    ended = await auth.set_own_password(users=users, sessions=sessions, caller=session, password=body.new_password)
    return PasswordChanged(sessions_ended=ended)
