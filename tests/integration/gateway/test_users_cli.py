"""`cairn user ...` against the real Redis: what each command prints, changes and ends."""
import asyncio
import getpass
import io
import re
import threading

import pytest
from fastapi.testclient import TestClient

from cairn import cli
from services.gateway import auth, users
from services.gateway.adapters.redis_store import RedisSessionStore, RedisUserStore, connect
from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import MAX_PASSWORD_LENGTH
from shared.errors import Unauthorized
from tests.support import free_port

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery"


def _login(redis_url: str, prefix: str, password: str = PASSWORD, username: str = "ann") -> tuple[str, tuple[str, ...]]:
    async def go():
        redis = connect(redis_url, timeout_s=2)
        stores = {"users": RedisUserStore(redis, prefix=prefix, timeout_s=2), "sessions": RedisSessionStore(redis, prefix=prefix, timeout_s=2)}
        try:
            token, session, _ = await auth.login(**stores, username=username, password=password, ttl_s=60, max_age_s=600)
            return token, session.roles
        finally:
            await redis.aclose()

    return asyncio.run(go())


def _is_live(redis_url: str, prefix: str, token: str) -> bool:
    async def go():
        redis = connect(redis_url, timeout_s=2)
        try:
            await auth.authenticate(sessions=RedisSessionStore(redis, prefix=prefix, timeout_s=2), token=token, ttl_s=60, max_age_s=600)
            return True
        except Unauthorized:
            return False
        finally:
            await redis.aclose()

    return asyncio.run(go())


def test_every_user_command(cairn_user, redis_url, unique):
    assert cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{PASSWORD}\n")[:2] == (0, "added ann (user)\n")
    token, roles = _login(redis_url, unique)
    assert roles == ("user",)

    code, out, _ = cairn_user("set-role", "ann", "--role", "analyst", "--role", "user")
    assert code == 0 and out == "ann now has the roles user, analyst; 1 session ended\n"
    assert not _is_live(redis_url, unique, token)
    token, roles = _login(redis_url, unique)
    assert roles == ("user", "analyst")

    assert cairn_user("disable", "ann")[:2] == (0, "disabled ann; 1 session ended\n")
    assert not _is_live(redis_url, unique, token)
    with pytest.raises(Unauthorized):
        _login(redis_url, unique)
    assert cairn_user("list")[1] == "ann                      user,analyst  (disabled)\n"
    assert cairn_user("enable", "ann")[:2] == (0, "enabled ann\n")
    token, _ = _login(redis_url, unique)

    code, out, _ = cairn_user("reset-password", "ann", "--password-stdin", stdin="a brand new password\n")
    assert code == 0 and out == "new password set for ann; 1 session ended\n"
    assert not _is_live(redis_url, unique, token)
    with pytest.raises(Unauthorized):
        _login(redis_url, unique)
    token, _ = _login(redis_url, unique, "a brand new password")

    assert cairn_user("delete", "ann")[:2] == (0, "deleted ann; 1 session ended\n")
    assert not _is_live(redis_url, unique, token)
    with pytest.raises(Unauthorized):
        _login(redis_url, unique, "a brand new password")
    assert cairn_user("list")[1] == "no users\n"
    code, _, err = cairn_user("delete", "ann")
    assert code == 2 and "no user 'ann'" in err


def test_a_password_piped_in_with_a_windows_line_end_is_the_password_without_it(cairn_user, redis_url, unique):
    assert cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{PASSWORD}\r\n")[0] == 0
    assert _login(redis_url, unique)
    assert cairn_user("reset-password", "ann", "--password-stdin", stdin="a brand new password\r\n")[0] == 0
    assert _login(redis_url, unique, "a brand new password")


def test_the_password_prompt_asks_twice(cairn_user, redis_url, unique, monkeypatch, capsys):
    cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{PASSWORD}\n")
    answers = iter(["another password", "another password"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt: next(answers))
    assert cairn_user("reset-password", "ann")[0] == 0
    assert _login(redis_url, unique, "another password")
    answers = iter(["one password", "a different one"])
    with pytest.raises(SystemExit) as refused:
        cairn_user("reset-password", "ann")
    assert refused.value.code == 2  # as for an unknown user: input to correct
    assert capsys.readouterr().err == "error: the passwords differ\n"
    assert _login(redis_url, unique, "another password"), "the password stays as it was"


def test_a_password_longer_than_a_login_takes_is_refused(cairn_user, redis_url, unique):
    """A password the gateway's login would refuse as too long would lock its user out for good."""
    longest = "p" * MAX_PASSWORD_LENGTH
    code, _, err = cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{longest}p\n")
    assert (code, err) == (2, f"error: password must be at most {MAX_PASSWORD_LENGTH} characters\n")
    assert cairn_user("list")[1] == "no users\n"

    assert cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{longest}\n")[0] == 0
    assert cairn_user("reset-password", "ann", "--password-stdin", stdin=f"{longest}p\n")[0] == 2
    with TestClient(create_app(Settings(redis_url=redis_url, redis_prefix=unique))) as client:
        assert client.post("/auth/login", json={"username": "ann", "password": longest}).status_code == 200


def test_refusals_are_one_clear_line(cairn_user, monkeypatch):
    assert cairn_user("disable", "nobody") == (2, "", "error: no user 'nobody'\n")
    assert cairn_user("set-role", "nobody", "--role", "user")[0] == 2
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    code, out, err = cairn_user("disable", "ann")
    assert code == 1 and out == "" and err.startswith("error: Redis (REDIS_URL) is unavailable: ")
    assert "connecting to 127.0.0.1:" in err and "may be incomplete" in err
    assert "Traceback" not in err and "\n" == err[-1] and err.count("\n") == 1


def test_cairn_up_keeps_the_demo_user_as_an_admin_left_it(cairn_user, redis_url, unique, tmp_path, monkeypatch):
    from cairn import demo
    from cairn.settings import CliSettings

    monkeypatch.delenv("CAIRN_DEMO_PASSWORD", raising=False)
    settings = CliSettings(redis_url=redis_url, redis_prefix=unique, data_dir=tmp_path / "data")
    first = demo.create_demo_user(settings)  # the first run creates it, with a password kept in the data directory
    assert first and demo.create_demo_user(settings) == first  # later runs find it as it was
    assert cairn_user("disable", "demo")[0] == 0
    assert demo.create_demo_user(settings) is None, "a disabled demo user is not offered for log-in"
    code, out, _ = cairn_user("list")
    assert code == 0 and any(line.startswith("demo") and "disabled" in line for line in out.splitlines())
    assert cairn_user("enable", "demo")[0] == 0
    assert cairn_user("reset-password", "demo", "--password-stdin", stdin="another long password\n")[0] == 0
    assert demo.create_demo_user(settings) is None, "nor one whose password an admin changed"
    # A new data directory beside a Redis that kept the user: its new password is the demo user's.
    fresh = CliSettings(redis_url=redis_url, redis_prefix=unique, data_dir=tmp_path / "new-data")
    password = demo.create_demo_user(fresh)
    assert password and password != first and _login_as_demo(redis_url, unique, password)
    configured = CliSettings(redis_url=redis_url, redis_prefix=unique, data_dir=tmp_path / "data", demo_password=PASSWORD)
    assert demo.create_demo_user(configured) == PASSWORD and _login_as_demo(redis_url, unique, PASSWORD)
    assert cairn_user("disable", "demo")[0] == 0
    assert demo.create_demo_user(configured) is None, "configured or not, a disabled demo user stays disabled"


def test_a_demo_password_set_by_the_environment_is_not_replaced_later(
    cairn_user, redis_url, unique, tmp_path, monkeypatch
):
    from cairn import demo
    from cairn.settings import CliSettings

    monkeypatch.delenv("CAIRN_DEMO_PASSWORD", raising=False)
    data = tmp_path / "data"
    configured = CliSettings(redis_url=redis_url, redis_prefix=unique, data_dir=data, demo_password=PASSWORD)
    assert demo.create_demo_user(configured) == PASSWORD
    assert cairn_user("reset-password", "demo", "--password-stdin", stdin="the admin's own password\n")[0] == 0
    # A later run without CAIRN_DEMO_PASSWORD: the data directory is not new, so the admin's password stays.
    unconfigured = CliSettings(redis_url=redis_url, redis_prefix=unique, data_dir=data)
    assert demo.create_demo_user(unconfigured) is None
    assert _login_as_demo(redis_url, unique, "the admin's own password")
    assert not (data / demo.PASSWORD_FILE).exists()


def test_cairn_ask_writes_no_demo_password(redis_url, unique, tmp_path, monkeypatch, capsys):
    def no_terminal(prompt: str = "") -> str:
        raise EOFError

    for name in ("CAIRN_DEMO_PASSWORD", "CAIRN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(getpass, "getpass", no_terminal)
    with pytest.raises(SystemExit) as refused:  # no password kept: it asks, as for any user
        cli.main(["ask", "anything"])
    assert refused.value.code == 2 and "error: no password given" in capsys.readouterr().err
    assert not (tmp_path / "data").exists(), "a question leaves the data directory as it was"


def _login_as_demo(redis_url: str, prefix: str, password: str) -> bool:
    try:
        _login(redis_url, prefix, password, username="demo")
    except Unauthorized:
        return False
    return True


def test_no_password_to_read_and_a_bad_redis_url_are_messages_not_tracebacks(cairn_user, monkeypatch, capsys):
    def no_terminal(prompt: str = "") -> str:
        raise EOFError  # what getpass raises with no terminal and nothing on standard input

    monkeypatch.setattr(getpass, "getpass", no_terminal)
    with pytest.raises(SystemExit) as refused:
        cairn_user("add", "carol", "--role", "user")
    assert refused.value.code == 2
    assert re.match(r"error: no password given: .* --password-stdin\n$", capsys.readouterr().err)
    monkeypatch.setenv("REDIS_URL", "notaurl")
    code, _, err = cairn_user("list")
    assert code == 2 and err.startswith("error: REDIS_URL: ")



@pytest.mark.parametrize(
    ("args", "expected"),
    [(["add", "an n", "--role", "user"], "error: username: 1-64 ASCII letters, digits or . _ @ -\n"),
     (["add", "ann", "--role", "user"], "error: user 'ann' already exists\n"),
     (["add", "ANN", "--role", "user"], "error: user 'ann' already exists; names that differ only in case are not allowed\n"),
     (["reset-password", "nobody"], "error: no user 'nobody'\n")],
    ids=["bad-name", "taken", "taken-in-another-case", "no-such-user"],
)
def test_a_user_command_that_must_fail_says_so_before_the_password_is_typed(
    cairn_user, monkeypatch, args, expected
):
    assert cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{PASSWORD}\n")[0] == 0
    prompts: list[str] = []
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": prompts.append(prompt) or PASSWORD)
    assert cairn_user(*args) == (2, "", expected)
    assert prompts == []


def _run_while_hashing(monkeypatch, *commands: list[str], stdin: str = "") -> list[int]:
    """Runs each `cairn user` command, in a thread, while the command under way hashes its new password:
    between its reading the user and its storing the change, as a second administrator's would."""
    codes: list[int] = []
    real_hash = users.hash_password

    def hash_while_others_run(password: str) -> str:
        monkeypatch.setattr(users, "hash_password", real_hash)  # the racing commands hash as usual
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        for command in commands:
            thread = threading.Thread(target=lambda c=command: codes.append(cli.main(["user", *c])))
            thread.start()
            thread.join()
        return real_hash(password)

    monkeypatch.setattr(users, "hash_password", hash_while_others_run)
    return codes


def test_user_commands_run_at_once_each_keep_their_change(cairn_user, redis_url, unique, monkeypatch):
    """A password reset racing `set-role` and `disable` must not write the old roles and `disabled` back."""
    assert cairn_user("add", "ann", "--role", "admin", "--password-stdin", stdin=f"{PASSWORD}\n")[0] == 0
    racing = _run_while_hashing(monkeypatch, ["set-role", "ann", "--role", "user"], ["disable", "ann"])
    assert cairn_user("reset-password", "ann", "--password-stdin", stdin="a brand new password\n")[0] == 0
    assert racing == [0, 0]
    assert cairn_user("list")[1] == "ann                      user  (disabled)\n"
    with pytest.raises(Unauthorized):
        _login(redis_url, unique, "a brand new password")
    assert cairn_user("enable", "ann")[0] == 0
    with pytest.raises(Unauthorized):
        _login(redis_url, unique)
    assert _login(redis_url, unique, "a brand new password")[1] == ("user",)


@pytest.mark.parametrize("second", ["ann", "Ann"])
def test_of_two_adds_of_one_name_at_once_only_one_succeeds(cairn_user, redis_url, unique, monkeypatch, second):
    """The later add used to overwrite the first user (another id, so the first one's sessions outlived a
    `cairn user disable`), or to add a second user differing only in case."""
    racing = _run_while_hashing(monkeypatch, ["add", second, "--role", "admin", "--password-stdin"], stdin="another password\n")
    code, out, err = cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=f"{PASSWORD}\n")
    assert racing == [0]
    assert code == 2 and out == f"added {second} (admin)\n" and err.startswith(f"error: user '{second}' already exists")
    assert cairn_user("list")[1] == f"{second:<24} admin\n"


def test_a_delete_of_a_user_added_again_meanwhile_leaves_the_new_one(redis_url, unique):
    """The store deletes a user only while the name is still that user's (same id), in one step."""

    async def go():
        redis = connect(redis_url, timeout_s=2)
        store = RedisUserStore(redis, prefix=unique, timeout_s=2)
        try:
            old = await users.add_user(users=store, username="ann", password=PASSWORD, roles=["user"])
            assert await store.delete(old)
            new = await users.add_user(users=store, username="ann", password=PASSWORD, roles=["user"])
            assert not await store.delete(old)
            return await store.get("ann"), new, [u.username for u in await store.list()]
        finally:
            await redis.aclose()

    kept, new, listed = asyncio.run(go())
    assert kept == new and listed == ["ann"]


def test_the_list_names_the_bad_fields_of_a_damaged_record_and_reset_password_repairs_it(cairn_user, redis_url, unique):
    assert cairn_user("add", "ann", "--role", "user", "--password-stdin", stdin=PASSWORD)[0] == 0

    async def damage():
        redis = connect(redis_url, timeout_s=2)
        await redis.hset(f"{unique}:user:ann", mapping={"roles": "user,owner"})
        await redis.hdel(f"{unique}:user:ann", "password_hash")
        await redis.aclose()

    asyncio.run(damage())
    assert cairn_user("list")[1] == "ann                      user  (damaged: password_hash, roles)\n"
    assert cairn_user("reset-password", "ann", "--password-stdin", stdin=PASSWORD)[0] == 0
    assert cairn_user("set-role", "ann", "--role", "user")[0] == 0
    assert cairn_user("list")[1] == "ann                      user\n"
    assert _login(redis_url, unique)[1] == ("user",)
