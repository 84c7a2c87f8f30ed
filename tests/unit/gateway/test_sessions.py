"""Listing and ending one's own sessions (auth.list_sessions / auth.end_session) against fakes."""
from dataclasses import replace
from datetime import timedelta

import pytest

from services.gateway import auth
from services.gateway.users import add_user
from shared.errors import NotFound, Unauthorized
from tests.unit.gateway.fakes import FakeSessionStore, FakeUserStore

pytestmark = pytest.mark.unit
LIFETIME = {"ttl_s": 60, "max_age_s": 3600}


@pytest.fixture
async def stores():
    users, sessions = FakeUserStore(), FakeSessionStore()
    for name in ("ann", "bob"):
        await add_user(users=users, username=name, password="correct horse", roles=["user"])
    return users, sessions


async def _login(users, sessions, username="ann"):
    token, session, _ = await auth.login(
        users=users, sessions=sessions, username=username, password="correct horse", **LIFETIME
    )
    return token, session


async def test_the_caller_sees_only_its_own_live_sessions_oldest_first(stores):
    users, sessions = stores
    (_, first), (_, expired), (token, current) = [await _login(users, sessions) for _ in range(3)]
    await _login(users, sessions, "bob")
    sessions.expire(expired.id)
    caller = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    listed = await auth.list_sessions(sessions=sessions, caller=caller, max_age_s=LIFETIME["max_age_s"])
    assert [s.public_id for s in listed] == [first.public_id, current.public_id]
    assert listed[-1] == caller  # the current one with the expiry this very call gave it
    assert sessions.by_user[caller.user_id] == {first.id, current.id}  # the expired one was forgotten


async def test_a_lowered_maximum_age_leaves_out_the_sessions_it_ended_and_caps_the_others(stores):
    """SESSION_MAX_AGE_SECONDS lowered after logins: a session older than the new age is refused at its next
    request, so it is not listed as live, and none is listed as expiring after the new limit."""
    users, sessions = stores
    (_, old), (_, other), (token, current) = [await _login(users, sessions) for _ in range(3)]
    sessions.sessions[old.id] = replace(old, created_at=old.created_at - timedelta(seconds=600))
    sessions.sessions[other.id] = replace(other, created_at=other.created_at - timedelta(seconds=280))
    lowered = {"ttl_s": 60, "max_age_s": 300}
    caller = await auth.authenticate(sessions=sessions, token=token, **lowered)
    listed = await auth.list_sessions(sessions=sessions, caller=caller, max_age_s=lowered["max_age_s"])
    assert [s.public_id for s in listed] == [other.public_id, current.public_id]
    assert listed[0].expires_at == other.created_at - timedelta(seconds=280) + timedelta(seconds=300)


async def test_ending_a_session_revokes_its_token(stores):
    users, sessions = stores
    (other_token, other), (token, _) = await _login(users, sessions), await _login(users, sessions)
    caller = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    await auth.end_session(sessions=sessions, caller=caller, public_id=other.public_id)
    with pytest.raises(Unauthorized):
        await auth.authenticate(sessions=sessions, token=other_token, **LIFETIME)
    assert await auth.authenticate(sessions=sessions, token=token, **LIFETIME)


async def test_someone_elses_session_is_as_unknown_as_a_made_up_one(stores):
    users, sessions = stores
    bob_token, bob = await _login(users, sessions, "bob")
    token, _ = await _login(users, sessions)
    caller = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    for public_id in (bob.public_id, "0123456789abcdef", bob.id, ""):
        with pytest.raises(NotFound) as refused:
            await auth.end_session(sessions=sessions, caller=caller, public_id=public_id)
        assert refused.value.status_code == 404
    assert await auth.authenticate(sessions=sessions, token=bob_token, **LIFETIME)
