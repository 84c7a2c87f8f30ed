"""The `cairn` commands that use Redis, given one that refuses them: one line on stderr saying what Redis
answered, no traceback, `cairn up` stopped cleanly, and only a command that writes warns of a partial change."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from redis.exceptions import AuthenticationError

from cairn import commands
from cairn.settings import CliSettings
from cairn.supervisor import Supervisor
from shared.errors import DependencyUnavailable
from tests.support import free_port

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def refused_login() -> DependencyUnavailable:
    """What the Redis stores raise when Redis wants a password REDIS_URL does not give."""
    try:
        raise AuthenticationError("invalid username-password pair or user is disabled.")
    except AuthenticationError as exc:
        try:
            raise DependencyUnavailable("session_store", "the session store (Redis) is unavailable") from exc
        except DependencyUnavailable as unavailable:
            return unavailable


def cairn(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "PYTHONPATH": str(REPO),
        "CAIRN_DATA_DIR": str(tmp_path / "data"),
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
    }
    return subprocess.run(
        [sys.executable, "-m", "cairn.cli", *args],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )


def test_listing_users_with_redis_down_says_why_and_warns_of_no_change(tmp_path):
    result = cairn("user", "list", tmp_path=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("error: Redis (REDIS_URL) is unavailable: Error 111 connecting to 127.0.0.1:")
    assert len(result.stderr.splitlines()) == 1 and "change" not in result.stderr


def test_a_change_with_redis_down_says_it_may_be_incomplete(tmp_path):
    result = cairn("user", "disable", "alice", tmp_path=tmp_path)
    assert result.returncode == 1
    assert result.stderr.endswith("; the change may be incomplete: run the command again\n")


def test_a_redis_that_refuses_the_login_is_named_as_such(tmp_path, monkeypatch, capsys):
    async def refusing(settings, action):
        raise refused_login()

    monkeypatch.setattr(commands, "_with_stores", refusing)
    assert commands.user_list(CliSettings(data_dir=tmp_path)) == 1
    assert capsys.readouterr().err == (
        "error: Redis (REDIS_URL) is unavailable: invalid username-password pair or user is disabled\n"
    )


def test_cairn_up_with_a_redis_that_refuses_the_demo_user_stops_in_one_line(tmp_path, monkeypatch, capsys):
    def create_demo_user(settings):
        raise refused_login()

    stopped = []
    monkeypatch.setattr(commands, "engines_for", lambda **urls: [])
    monkeypatch.setattr(Supervisor, "check_ports", lambda self: None)
    monkeypatch.setattr(Supervisor, "start_all", lambda self: None)
    monkeypatch.setattr(Supervisor, "not_ready", lambda self: {})
    monkeypatch.setattr(Supervisor, "stop_all", lambda self: stopped.append(True))
    monkeypatch.setattr(commands.demo, "create_demo_user", create_demo_user)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = commands.up(CliSettings(data_dir=tmp_path, replicas="", chroma_server=False), ingest_demo=False)
    finally:
        for stop_signal, handler in handlers.items():
            signal.signal(stop_signal, handler)
    assert (status, stopped) == (1, [True])
    assert capsys.readouterr().err == (
        "cannot start: demo user: Redis (REDIS_URL) is unavailable: "
        "invalid username-password pair or user is disabled\n"
    )
