"""`cairn user` and /api/users rules: disabling, new roles and a new password end the user's sessions at once."""
import pytest

from services.gateway import auth
from services.gateway.users import (
    OwnAccount,
    UnknownUser,
    UserError,
    add_user,
    change_user,
    check_own_change,
    check_own_delete,
    delete_user,
    disable_user,
    enable_user,
    reset_password,
    set_roles,
)
from shared.errors import Unauthorized
from tests.unit.gateway.fakes import FakeSessionStore, FakeUserStore

pytestmark = pytest.mark.unit
PASSWORD = "correct horse"
LIFETIME = {"ttl_s": 60, "max_age_s": 3600}


@pytest.fixture
async def stores():
    users, sessions = FakeUserStore(), FakeSessionStore()
    for name in ("ann", "bob"):
        await add_user(users=users, username=name, password=PASSWORD, roles=["user"])
    return users, sessions


async def _login(users, sessions, username="ann", password=PASSWORD) -> str:
    token, _, _ = await auth.login(users=users, sessions=sessions, username=username, password=password, **LIFETIME)
    return token


async def _is_live(sessions, token) -> bool:
    try:
        await auth.authenticate(sessions=sessions, token=token, **LIFETIME)
        return True
    except Unauthorized:
        return False


async def test_disabling_ends_every_session_and_refuses_logins(stores):
    users, sessions = stores
    tokens = [await _login(users, sessions) for _ in range(3)]
    other = await _login(users, sessions, "bob")
    change = await disable_user(users=users, sessions=sessions, username="ann")
    assert change.sessions_ended == 3 and change.user.disabled
    assert [await _is_live(sessions, t) for t in tokens] == [False] * 3
    assert await _is_live(sessions, other)  # bob is untouched
    with pytest.raises(Unauthorized, match="invalid username or password"):
        await _login(users, sessions)
    assert (await disable_user(users=users, sessions=sessions, username="ann")).sessions_ended == 0

    await enable_user(users=users, username="ann")
    assert await _is_live(sessions, await _login(users, sessions))


async def test_new_roles_end_the_sessions_that_carry_the_old_ones(stores):
    users, sessions = stores
    token = await _login(users, sessions)
    change = await set_roles(users=users, sessions=sessions, username="ann", roles=["analyst", "user"])
    assert change.user.roles == ("user", "analyst") and change.sessions_ended == 1
    assert not await _is_live(sessions, token)
    _, session, _ = await auth.login(users=users, sessions=sessions, username="ann", password=PASSWORD, **LIFETIME)
    assert session.roles == ("user", "analyst")


async def test_a_new_password_ends_the_sessions_and_the_old_password(stores):
    users, sessions = stores
    token = await _login(users, sessions)
    change = await reset_password(users=users, sessions=sessions, username="ann", password="a new password")
    assert change.sessions_ended == 1 and not await _is_live(sessions, token)
    with pytest.raises(Unauthorized):
        await _login(users, sessions)
    assert await _is_live(sessions, await _login(users, sessions, password="a new password"))


async def test_a_refused_change_changes_nothing(stores):
    users, sessions = stores
    token = await _login(users, sessions)
    before = users.users["ann"]
    with pytest.raises(UserError, match="roles"):
        await set_roles(users=users, sessions=sessions, username="ann", roles=["wizard"])
    with pytest.raises(UserError, match="at least"):
        await reset_password(users=users, sessions=sessions, username="ann", password="short")
    assert users.users["ann"] == before and await _is_live(sessions, token)


async def test_unknown_users_are_named_in_the_error(stores):
    users, sessions = stores
    calls = (
        disable_user(users=users, sessions=sessions, username="zed"),
        enable_user(users=users, username="zed"),
        set_roles(users=users, sessions=sessions, username="zed", roles=["user"]),
        reset_password(users=users, sessions=sessions, username="zed", password="long enough"),
        change_user(users=users, sessions=sessions, username="zed", roles=None, disabled=False),
    )
    for call in calls:
        with pytest.raises(UnknownUser, match="no user 'zed'"):
            await call



async def test_one_change_sets_roles_and_enables_and_only_enabling_keeps_the_sessions(stores):
    users, sessions = stores
    token = await _login(users, sessions)
    enabled = await change_user(users=users, sessions=sessions, username="ann", roles=None, disabled=False)
    assert enabled.sessions_ended == 0 and await _is_live(sessions, token)
    await disable_user(users=users, sessions=sessions, username="ann")
    both = await change_user(users=users, sessions=sessions, username="ann", roles=["analyst"], disabled=False)
    assert (both.user.roles, both.user.disabled) == (("analyst",), False)
    token = await _login(users, sessions)
    demoted = await change_user(users=users, sessions=sessions, username="ann", roles=["user"], disabled=None)
    assert demoted.sessions_ended == 1 and not await _is_live(sessions, token)
    with pytest.raises(UserError, match="nothing to change"):
        await change_user(users=users, sessions=sessions, username="ann", roles=None, disabled=None)


@pytest.mark.parametrize(
    ("roles", "disabled", "refused"),
    [
        (None, True, True),
        (["user", "analyst"], None, True),
        (["admin"], True, True),
        (["analyst", "admin"], False, False),
        (None, False, False),
    ],
    ids=["disable", "drop admin", "keep admin but disable", "keep admin", "enable"],
)
async def test_an_admin_may_not_lock_its_own_account_out(stores, roles, disabled, refused):
    users, _ = stores
    admin = await add_user(users=users, username="ada", password=PASSWORD, roles=["admin"])
    if refused:
        with pytest.raises(OwnAccount):
            check_own_change(caller_id=admin.id, user=admin, roles=roles, disabled=disabled)
    else:
        check_own_change(caller_id=admin.id, user=admin, roles=roles, disabled=disabled)
    check_own_change(caller_id="another admin", user=admin, roles=roles, disabled=disabled)  # never refused


async def test_deleting_ends_the_sessions_and_frees_the_name_for_a_new_user(stores):
    users, sessions = stores
    tokens = [await _login(users, sessions) for _ in range(2)]
    old = await users.get("ann")
    change = await delete_user(users=users, sessions=sessions, username="ann")
    assert (change.user, change.sessions_ended) == (old, 2)
    assert [await _is_live(sessions, t) for t in tokens] == [False, False]
    with pytest.raises(Unauthorized):
        await _login(users, sessions)
    with pytest.raises(UnknownUser):
        await delete_user(users=users, sessions=sessions, username="ann")

    again = await add_user(users=users, username="ann", password="another password", roles=["user"])
    assert again.id != old.id  # nothing kept under the old id passes to the new user
    assert await _is_live(sessions, await _login(users, sessions, password="another password"))


async def test_a_user_added_again_under_the_name_is_not_deleted_in_its_place(stores):
    users, sessions = stores
    old = await users.get("ann")
    await users.delete(old)
    await add_user(users=users, username="ann", password=PASSWORD, roles=["user"])
    assert not await users.delete(old)
    assert (await users.get("ann")).id != old.id


async def test_an_admin_may_not_delete_its_own_account(stores):
    users, _ = stores
    ann = await users.get("ann")
    with pytest.raises(OwnAccount):
        check_own_delete(caller_id=ann.id, user=ann)
    check_own_delete(caller_id=(await users.get("bob")).id, user=ann)
