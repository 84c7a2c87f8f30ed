import hashlib
from dataclasses import replace

import pytest

from services.gateway import auth
from services.gateway.roles import grants, validate_roles
from services.gateway.users import UserError, add_user, ensure_user, set_password
from shared.errors import Unauthorized
from tests.unit.gateway.fakes import FakeSessionStore, FakeUserStore

pytestmark = pytest.mark.unit


@pytest.fixture
async def stores():
    users, sessions = FakeUserStore(), FakeSessionStore()
    await add_user(users=users, username="ann", password="correct horse", roles=["analyst"])
    return users, sessions


async def test_login_stores_only_the_token_digest(stores):
    users, sessions = stores
    token, session, user = await auth.login(
        users=users, sessions=sessions, username="ann", password="correct horse", ttl_s=60
    )
    assert len(token) >= 43  # 32 random bytes, base64url
    assert list(sessions.sessions) == [hashlib.sha256(token.encode()).hexdigest()]
    assert token not in repr(sessions.sessions)
    assert sessions.ttls[session.id] == 60
    assert session.roles == user.roles == ("analyst",)


@pytest.mark.parametrize("username,password", [("ann", "wrong password"), ("bob", "correct horse")])
async def test_bad_credentials_get_one_indistinct_error(stores, username, password):
    users, sessions = stores
    with pytest.raises(Unauthorized, match="invalid username or password"):
        await auth.login(users=users, sessions=sessions, username=username, password=password, ttl_s=60)
    assert sessions.sessions == {}


async def test_disabled_user_cannot_log_in(stores):
    users, sessions = stores
    users.users["ann"] = replace(users.users["ann"], disabled=True)
    with pytest.raises(Unauthorized):
        await auth.login(users=users, sessions=sessions, username="ann", password="correct horse", ttl_s=60)


async def test_authenticate_slides_the_expiry_and_rejects_unknown_tokens(stores):
    users, sessions = stores
    token, session, _ = await auth.login(users=users, sessions=sessions, username="ann", password="correct horse", ttl_s=60)
    sessions.ttls[session.id] = 5
    assert (await auth.authenticate(sessions=sessions, token=token, ttl_s=60)).user_id == session.user_id
    assert sessions.ttls[session.id] == 60
    for bad in (None, "", "not-a-token", token + "x"):
        with pytest.raises(Unauthorized):
            await auth.authenticate(sessions=sessions, token=bad, ttl_s=60)


async def test_logout_revokes(stores):
    users, sessions = stores
    token, session, _ = await auth.login(users=users, sessions=sessions, username="ann", password="correct horse", ttl_s=60)
    await auth.logout(sessions=sessions, session=session)
    with pytest.raises(Unauthorized):
        await auth.authenticate(sessions=sessions, token=token, ttl_s=60)


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
    with pytest.raises(UserError, match="at least"):
        await add_user(users=users, username="dog", password="short", roles=["user"])
    with pytest.raises(UserError, match="username"):
        await add_user(users=users, username="no spaces", password="long enough", roles=["user"])
    with pytest.raises(UserError, match="roles"):
        await add_user(users=users, username="eel", password="long enough", roles=["wizard"])
    changed = await set_password(users=users, username="cat", password="another one")
    assert changed.password_hash != user.password_hash and changed.id == user.id
    demo = await ensure_user(users=users, username="cat", password="third password", roles=["admin"])
    assert demo.id == user.id and demo.roles == ("admin",)
