"""`cairn up --replicas`: the spec parsing, and which processes run on which ports with which environment."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cairn import cli
from cairn import commands
from cairn.commands import _status_rows
from cairn.settings import CliSettings, parse_replicas
from cairn.run_state import read_state, state_file, write_state
from cairn.supervisor import CHROMA, MAX_RESTARTS, Child, StartFailed, Supervisor, plan, shared_env
from tests.support import free_port

pytestmark = pytest.mark.unit


def settings(tmp_path: Path, **overrides) -> CliSettings:
    """Explicit ports and no inherited CAIRN_REPLICAS / CHROMA_URL, whatever the environment says."""
    values = {
        "data_dir": tmp_path, "gateway_port": 8000, "chat_port": 8001, "retrieval_port": 8002, "analytics_port": 8003,
        "chroma_port": 8004, "replicas": "", "replica_port_step": 10, "chroma_server": False, "chroma_url": None,
        **overrides,
    }
    return CliSettings(**values)


@pytest.mark.parametrize(
    ("spec", "counts"),
    [
        ("chat=2,retrieval=2", {"chat": 2, "retrieval": 2}),
        (" retrieval = 3 , ", {"retrieval": 3}),
        ("chat=1", {"chat": 1}),
        ("", {}),
    ],
)
def test_a_replica_spec_gives_the_count_of_each_named_service(spec, counts):
    assert parse_replicas(spec) == counts


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("gateway=2", "only chat and retrieval"),
        ("analytics=2", "only chat and retrieval"),
        ("chat=0", "between 1 and 16"),
        ("chat=17", "between 1 and 16"),
        ("chat=two", "is not SERVICE=COUNT"),
        ("chat", "is not SERVICE=COUNT"),
        ("chat=2,chat=3", "named twice"),
    ],
)
def test_a_wrong_replica_spec_is_refused_saying_why(spec, complaint):
    with pytest.raises(ValueError, match=complaint):
        parse_replicas(spec)


def test_cairn_up_refuses_a_wrong_spec_before_starting_anything(capsys):
    with pytest.raises(SystemExit) as exited:  # as argparse refuses a bad option
        cli.main(["up", "--replicas", "gateway=2"])
    assert exited.value.code == 2
    assert "only chat and retrieval take replicas" in capsys.readouterr().err


def test_the_replicas_option_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("CAIRN_REPLICAS", "chat=3")
    assert CliSettings().replicas == {"chat": 3}
    args = cli._parser().parse_args(["up", "--replicas", "retrieval=2"])
    assert CliSettings(**cli._up_options(args)).replicas == {"retrieval": 2}


def test_without_replicas_the_four_services_run_as_before(tmp_path):
    cairn = settings(tmp_path)
    children = plan(cairn)
    assert [(c.name, c.port) for c in children] == [("retrieval", 8002), ("analytics", 8003), ("chat", 8001), ("gateway", 8000)]
    assert all(c.env == {f"{c.service.upper()}_PORT": str(c.port)} for c in children)  # no OUTBOX_PATH, no Chroma
    env = shared_env(cairn)
    assert env["CHAT_URLS"] == env["CHAT_URL"] == "http://127.0.0.1:8001"
    assert env["RETRIEVAL_URLS"] == env["RETRIEVAL_URL"] == "http://127.0.0.1:8002"
    assert "CHROMA_URL" not in env
    assert Supervisor(cairn).describe() == "gateway, chat, retrieval and analytics"


def test_replicas_get_ports_a_step_apart_their_own_outbox_and_a_shared_chroma_server(tmp_path):
    cairn = settings(tmp_path, replicas="chat=2,retrieval=3")
    children = plan(cairn, chroma_command="/bin/chroma")
    assert [(c.name, c.port) for c in children] == [
        ("chroma", 8004),
        ("retrieval", 8002), ("retrieval-2", 8012), ("retrieval-3", 8022),
        ("analytics", 8003),
        ("chat", 8001), ("chat-2", 8011),
        ("gateway", 8000),
    ]
    by_name = {c.name: c for c in children}
    server = tmp_path.resolve() / "chroma-server"
    assert by_name[CHROMA].command == ("/bin/chroma", "run", "--path", str(server), "--host", "127.0.0.1", "--port", "8004")
    assert by_name["chat-2"].env == {
        "CHAT_PORT": "8011", "OUTBOX_PATH": str(tmp_path.resolve() / "outbox" / "chat-2.sqlite3")
    }
    assert by_name["retrieval-3"].env["RETRIEVAL_PORT"] == "8022"
    assert "OUTBOX_PATH" not in by_name["chat"].env  # the first replica keeps today's file
    env = shared_env(cairn)
    assert env["CHAT_URLS"] == "http://127.0.0.1:8001,http://127.0.0.1:8011"
    assert env["RETRIEVAL_URLS"] == "http://127.0.0.1:8002,http://127.0.0.1:8012,http://127.0.0.1:8022"
    assert env["CHAT_URL"] == "http://127.0.0.1:8001" and env["CHAT_PORT"] == "8001"
    assert env["CHROMA_URL"] == "http://127.0.0.1:8004"
    assert by_name[CHROMA].health_url == "http://127.0.0.1:8004/api/v2/heartbeat"
    assert by_name["chat-2"].health_url == "http://127.0.0.1:8011/healthz"


def test_a_chroma_server_of_the_users_own_replaces_the_one_cairn_starts(tmp_path):
    cairn = settings(tmp_path, replicas="retrieval=2", chroma_url="http://chroma.internal:8000")
    assert CHROMA not in [c.name for c in plan(cairn)]
    assert "CHROMA_URL" not in shared_env(cairn)  # the children inherit the user's own variable


def test_one_retrieval_uses_the_embedded_index_unless_a_chroma_server_is_asked_for(tmp_path):
    assert CHROMA not in [c.name for c in plan(settings(tmp_path, replicas="chat=2"))]
    children = plan(settings(tmp_path, chroma_server=True))
    assert [c.name for c in children] == ["chroma", "retrieval", "analytics", "chat", "gateway"]


def test_a_replica_port_that_another_service_uses_is_refused(tmp_path):
    with pytest.raises(StartFailed, match="chat-2 would listen on port 8011, which retrieval uses"):
        plan(settings(tmp_path, replicas="chat=2", retrieval_port=8011))
    with pytest.raises(StartFailed, match="port 65540, which does not exist"):
        plan(settings(tmp_path, replicas="chat=2", chat_port=65530))


def test_status_lists_the_replicas_and_the_chroma_server_a_running_cairn_recorded(tmp_path):
    cairn = settings(tmp_path, replicas="chat=2,retrieval=2")
    cairn.run_dir.mkdir()
    urls = {c.name: c.url for c in plan(cairn, chroma_command="chroma")}
    state_file(cairn).write_text(json.dumps({"supervisor": 1, "services": {}, "urls": urls}))
    assert [name for name, _ in _status_rows(cairn, read_state(cairn))] == [
        "chroma", "retrieval", "retrieval-2", "analytics", "chat", "chat-2", "gateway"
    ]
    assert dict(_status_rows(cairn, read_state(cairn)))["chat-2"] == "http://127.0.0.1:8011"


def test_status_reads_every_address_from_the_running_cairn_and_says_when_its_supervisor_is_gone(tmp_path, capsys):
    cairn = settings(tmp_path)
    moved = {c.name: f"http://127.0.0.1:{c.port + 10000}" for c in plan(cairn)}  # started with other ports
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_state(cairn, supervisor=gone.pid, services={}, urls=moved)
    assert dict(_status_rows(cairn, read_state(cairn))) == moved
    assert commands.status(cairn) == 1
    assert "the `cairn up` that started these is not running" in capsys.readouterr().out


def test_a_spawned_child_stops_at_sigterm(tmp_path):
    """The supervisor holds SIGINT and SIGTERM while it spawns; its children must not inherit that, or every
    `cairn down` would wait out its timeout and kill them."""
    supervisor = Supervisor(settings(tmp_path))
    child = Child(name="sleeper", service="chat", port=1, command=(sys.executable, "-c", "import time; time.sleep(60)"))
    supervisor.spawn(child)
    process = supervisor.processes["sleeper"]
    try:
        blocked = int(next(line for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
                           if line.startswith("SigBlk:")).split()[1], 16)
        assert blocked & (1 << (signal.SIGTERM - 1) | 1 << (signal.SIGINT - 1)) == 0
        process.terminate()
        assert process.wait(timeout=5) == -signal.SIGTERM
    finally:
        process.kill()


def test_a_process_is_restarted_after_each_death_and_given_up_only_after_deaths_in_a_row(tmp_path):
    crashing = Child(name="chat", service="chat", port=1, command=(sys.executable, "-c", "raise SystemExit(3)"))
    supervisor = Supervisor(settings(tmp_path))
    supervisor.children = [crashing]
    supervisor.restarts = {"chat": 0}
    supervisor.spawn(crashing)
    supervisor.restart_pause_s = 0  # the pauses before a restart are tested in test_supervisor_restart_pauses.py
    supervisor.stable_after_s = 0  # every run counts as stable: a death now and then is restarted forever
    deaths = iter(range(2 * MAX_RESTARTS))
    supervisor.watch(should_stop=lambda: next(deaths, None) is None)
    assert supervisor.restarts["chat"] <= 1
    supervisor.stable_after_s = 3600  # deaths in a row: given up after MAX_RESTARTS
    with pytest.raises(StartFailed, match="chat keeps dying"):
        supervisor.watch(should_stop=lambda: False)
    assert supervisor.restarts["chat"] == MAX_RESTARTS


def test_a_service_that_refuses_its_settings_is_reported_with_its_own_lines(tmp_path):
    script = "import sys; print('chat: cannot start: LOG_LEVEL: Input should be ...', file=sys.stderr); sys.exit(2)"
    refusing = Child(name="chat", service="chat", port=free_port(), command=(sys.executable, "-c", script))
    supervisor = Supervisor(settings(tmp_path))
    supervisor.settings.log_dir.mkdir(parents=True)
    supervisor.log_path("chat").write_text("chat: cannot start: CHAT_URLS: an earlier run's problem\n")
    supervisor.children = [refusing]
    supervisor.spawn(refusing)
    with pytest.raises(StartFailed) as failed:
        supervisor.wait_healthy([refusing])
    assert str(failed.value).splitlines()[1:] == ["  chat: cannot start: LOG_LEVEL: Input should be ..."]
    assert str(failed.value).startswith("chat exited with code 2; see ")


def test_a_service_port_another_program_listens_on_is_refused_before_anything_starts(tmp_path):
    # Seen before as "chat exited with code 3; see chat.log", the reason only inside the log.
    with socket.socket() as other_program:
        other_program.bind(("127.0.0.1", 0))
        other_program.listen()
        port = other_program.getsockname()[1]
        ports = {f"{name}_port": free_port() for name in ("gateway", "retrieval", "analytics")}
        supervisor = Supervisor(settings(tmp_path, chat_port=port, **ports))
        supervisor.spawn = lambda child: pytest.fail(f"{child.name} was started")
        with pytest.raises(StartFailed, match=f"port {port} for chat is used by another program"):
            supervisor.start_all()
