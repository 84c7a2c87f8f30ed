import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from services.gateway import auth
from services.gateway.domain import SessionLifetime
from services.gateway.roles import grants, validate_roles
from services.gateway.users import UserError, add_user, ensure_user, set_password
from shared.errors import DependencyUnavailable, Unauthorized
from tests.unit.gateway.fakes import FakeSessionStore, FakeUserStore

pytestmark = pytest.mark.unit
LIFETIME = {"ttl_s": 60, "max_age_s": 3600}


@pytest.fixture
async def stores():
    users, sessions = FakeUserStore(), FakeSessionStore()
    await add_user(users=users, username="ann", password="correct horse", roles=["analyst"])
    return users, sessions


async def _login(users, sessions, **lifetime):
    return await auth.login(
        users=users, sessions=sessions, username="ann", password="correct horse", **(lifetime or LIFETIME)
    )


async def test_login_stores_only_the_token_digest(stores):
    users, sessions = stores
    token, session, user = await _login(users, sessions)
    assert len(token) >= 43  # 32 random bytes, base64url
    assert list(sessions.sessions) == [hashlib.sha256(token.encode()).hexdigest()]
    assert token not in repr(sessions.sessions)
    assert sessions.ttls[session.id] == 60
    assert session.roles == user.roles == ("analyst",)


async def test_the_public_id_is_random_and_unrelated_to_the_token(stores):
    users, sessions = stores
    (token, first, _), (_, second, _) = await _login(users, sessions), await _login(users, sessions)
    assert len(first.public_id) == 16 and first.public_id != second.public_id
    assert first.public_id not in first.id and first.public_id not in token


@pytest.mark.parametrize("username,password", [("ann", "wrong password"), ("bob", "correct horse")])
async def test_bad_credentials_get_one_indistinct_error(stores, username, password):
    users, sessions = stores
    with pytest.raises(Unauthorized, match="invalid username or password"):
        await auth.login(users=users, sessions=sessions, username=username, password=password, **LIFETIME)
    assert sessions.sessions == {}


async def test_a_user_whose_password_hash_is_blank_cannot_log_in(stores):
    """A blanked hash (an operator locking a user by hand in Redis) opens to no password: not even the
    one the stand-in hash for unknown users is made from."""
    users, sessions = stores
    users.users["ann"] = replace(users.users["ann"], password_hash="")
    for password in ("cairn-no-such-user", "correct horse"):
        with pytest.raises(Unauthorized):
            await auth.login(users=users, sessions=sessions, username="ann", password=password, **LIFETIME)
    assert sessions.sessions == {}


async def test_disabled_user_cannot_log_in(stores):
    users, sessions = stores
    users.users["ann"] = replace(users.users["ann"], disabled=True)
    with pytest.raises(Unauthorized):
        await _login(users, sessions)


class _ChangedDuringLogin(FakeUserStore):
    """Disables the user right after the login has read it, as a racing `cairn user disable` would."""

    async def get(self, username):
        user = await super().get(username)
        if user and not user.disabled:
            self.users[username] = replace(user, disabled=True)
        return user


async def test_a_login_racing_a_disable_keeps_no_session():
    users, sessions = _ChangedDuringLogin(), FakeSessionStore()
    users.users["ann"] = await add_user(users=FakeUserStore(), username="ann", password="correct horse", roles=["user"])
    with pytest.raises(Unauthorized):
        await _login(users, sessions)
    assert sessions.sessions == {} and users.users["ann"].disabled


async def test_authenticate_slides_the_expiry_and_rejects_unknown_tokens(stores):
    users, sessions = stores
    token, session, _ = await _login(users, sessions)
    sessions.sessions[session.id] = replace(session, expires_at=datetime.now(UTC) + timedelta(seconds=5))
    sessions.ttls[session.id] = 5
    seen = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    assert seen.user_id == session.user_id and sessions.ttls[session.id] == 60
    assert sessions.sessions[session.id].last_seen == seen.last_seen > session.last_seen
    for bad in (None, "", "not-a-token", token + "x", token[:-1]):
        with pytest.raises(Unauthorized):
            await auth.authenticate(sessions=sessions, token=bad, **LIFETIME)


async def test_a_session_used_again_soon_is_not_written_until_its_expiry_would_move_by_the_refresh_delay(stores):
    users, sessions = stores
    token, session, _ = await _login(users, sessions)
    delay = timedelta(seconds=LIFETIME["ttl_s"] / 10)  # a tenth of a short idle lifetime
    sessions.ttls[session.id] = 17  # a marker: any write sets the full 60 s again
    for _ in range(3):
        seen = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    assert sessions.ttls[session.id] == 17 and sessions.sessions[session.id] == session
    assert seen.last_seen == session.last_seen and seen.expires_at == session.last_seen + timedelta(seconds=60)

    earlier = replace(session, last_seen=session.last_seen - delay, expires_at=session.expires_at - delay)
    sessions.sessions[session.id] = earlier
    seen = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    assert sessions.ttls[session.id] == 60 and seen.last_seen > session.last_seen
    assert sessions.sessions[session.id].last_seen == seen.last_seen


async def test_an_expired_session_is_refused(stores):
    users, sessions = stores
    token, session, _ = await _login(users, sessions)
    sessions.expire(session.id)
    with pytest.raises(Unauthorized, match="invalid or expired token"):
        await auth.authenticate(sessions=sessions, token=token, **LIFETIME)


async def test_no_session_outlives_its_maximum_age_however_busy(stores):
    users, sessions = stores
    token, session, _ = await _login(users, sessions)
    nearly = datetime.now(UTC) - timedelta(seconds=3590)
    sessions.sessions[session.id] = replace(session, created_at=nearly)
    fresh = await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    assert sessions.ttls[session.id] <= 10  # the sliding expiry stops at the hard limit
    assert fresh.expires_at == nearly + timedelta(seconds=3600)

    sessions.sessions[session.id] = replace(session, created_at=nearly - timedelta(seconds=11))
    with pytest.raises(Unauthorized):
        await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    assert session.id not in sessions.sessions  # ended, not just refused


async def test_a_login_expires_by_the_maximum_age_when_it_is_shorter_than_the_ttl(stores):
    users, sessions = stores
    _, session, _ = await _login(users, sessions, ttl_s=600, max_age_s=30)
    assert sessions.ttls[session.id] == 30
    assert session.expires_at == session.created_at + timedelta(seconds=30)


def test_lifetimes_must_be_positive():
    for idle, max_age in ((0, 10), (10, 0), (-1, 10)):
        with pytest.raises(ValueError):
            SessionLifetime(idle_s=idle, max_age_s=max_age)


async def test_logout_revokes(stores):
    users, sessions = stores
    token, session, _ = await _login(users, sessions)
    await auth.logout(sessions=sessions, session=session)
    with pytest.raises(Unauthorized):
        await auth.authenticate(sessions=sessions, token=token, **LIFETIME)


async def test_a_store_that_does_not_answer_fails_closed(stores):
    users, sessions = stores
    token, _, _ = await _login(users, sessions)
    sessions.down = True
    with pytest.raises(DependencyUnavailable) as caught:
        await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
    assert caught.value.status_code == 503 and caught.value.code == "session_store_unavailable"


def test_roles_build_on_each_other():
    assert grants(("analyst",), "user") and grants(("analyst",), "analyst")
    assert not grants(("analyst",), "admin")
    assert grants(("admin",), "analyst")
    assert not grants(("user",), "analyst")
    assert not grants((), "user")
    with pytest.raises(ValueError):
        validate_roles(["root"])


async def test_user_management_rules():
    users = FakeUserStore()
    user = await add_user(users=users, username="cat", password="long enough", roles=["user", "user"])
    assert user.roles == ("user",) and user.password_hash.startswith("$argon2")
    with pytest.raises(UserError, match="already exists"):
        await add_user(users=users, username="cat", password="long enough", roles=["user"])
    with pytest.raises(UserError, match="user 'cat' already exists; names that differ only in case"):
        await add_user(users=users, username="Cat", password="long enough", roles=["user"])
    with pytest.raises(UserError, match="at least"):
        await add_user(users=users, username="dog", password="short", roles=["user"])
    with pytest.raises(UserError, match="username"):
        await add_user(users=users, username="no spaces", password="long enough", roles=["user"])
    with pytest.raises(UserError, match="username"):  # "$" alone would let a final newline through
        await add_user(users=users, username="cat\n", password="long enough", roles=["user"])
    with pytest.raises(UserError, match="roles"):
        await add_user(users=users, username="eel", password="long enough", roles=["wizard"])
    changed = await set_password(users=users, username="cat", password="another one")
    assert changed.password_hash != user.password_hash and changed.id == user.id
    demo = await ensure_user(users=users, username="cat", password="third password", roles=["admin"])
    assert demo == changed, "an existing user is left as it is"
    created = await ensure_user(users=users, username="dog", password="long enough", roles=["admin"])
    assert created.roles == ("admin",) and await users.get("dog") == created


async def test_a_demo_user_created_by_another_start_meanwhile_is_kept() -> None:
    """Two `cairn up` at once both find no demo user; the one whose create comes second keeps the first's."""
    users = FakeUserStore()
    first = await add_user(users=users, username="demo", password="first password", roles=["admin"])
    looks = users.get

    async def not_there_yet(username: str):
        users.get = looks  # the next look finds it
        return None

    users.get = not_there_yet
    assert await ensure_user(users=users, username="demo", password="other password", roles=["admin"]) == first
