"""`cairn up` refuses a CAIRN_DATA_DIR that cannot be a folder in one line, warns, without failing the
start, of a service that answers /healthz while its /readyz says a dependency it needs is down, and stops its
services when its terminal is closed."""
from __future__ import annotations

import errno
import io
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from cairn import commands, supervisor
from cairn.engines import EngineMissing
from cairn.settings import SERVICES, CliSettings
from cairn.run_state import state_file
from cairn.supervisor import Child, Supervisor
from shared.web import create_service_app
from tests.support import free_port, serve_in_thread, wait_until

pytestmark = pytest.mark.unit


def settings(data_dir: Path, **overrides) -> CliSettings:
    values = {"data_dir": data_dir, "replicas": "", "chroma_server": False, "chroma_url": None, **overrides}
    return CliSettings(**values)


def test_a_data_dir_under_a_regular_file_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    data_dir = tmp_path / "afile" / "data"
    assert commands.up(settings(data_dir)) == 1
    assert capsys.readouterr().err == f"cannot start: CAIRN_DATA_DIR: {data_dir}: Not a directory\n"


@pytest.mark.parametrize(("password", "problem"), [
    ("short", "password must be at least 8 characters"),
    ("x" * 1025, "password must be at most 1024 characters"),
], ids=["too-short", "too-long"])
def test_a_demo_password_no_user_may_have_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys, password, problem):
    # It was refused only after the services had started and the demo collection was in: minutes on a first run.
    def no_engines(**urls):  # `cairn up` got past the check: stop it before it starts anything
        raise EngineMissing("stopped by the test")

    monkeypatch.setattr(commands, "engines_for", no_engines)
    assert commands.up(settings(tmp_path / "data", demo_password=password)) == 1
    assert capsys.readouterr().err == f"cannot start: CAIRN_DEMO_PASSWORD: {problem}\n"
    assert not (tmp_path / "data").exists()


def test_a_port_another_program_holds_is_refused_in_one_line_before_starting_is_said(tmp_path, monkeypatch, capsys):
    # It printed "starting gateway, ..." and "stopping Cairn ..." around the refusal, though nothing had started.
    monkeypatch.setattr(commands, "engines_for", lambda **urls: [])
    monkeypatch.setattr(Supervisor, "spawn", lambda self, child: pytest.fail(f"{child.name} was started"))
    with socket.socket() as other_program:
        other_program.bind(("127.0.0.1", 0))
        other_program.listen()
        port = other_program.getsockname()[1]
        ports = {f"{name}_port": free_port() for name in ("gateway", "retrieval", "analytics")}
        assert commands.up(settings(tmp_path / "data", chat_port=port, **ports)) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"cannot start: port {port} for chat is used by another program\n")


def reporting(**checks: bool):
    async def readiness() -> dict[str, bool]:
        return checks

    return readiness


def ready_after(calls: int):
    """Reports the broker down for its first `calls` checks, as a service still connecting to it."""
    asked = 0

    async def readiness() -> dict[str, bool]:
        nonlocal asked
        asked += 1
        return {"broker": asked > calls}

    return readiness


@contextmanager
def stand_ins(**readiness) -> Iterator[dict[str, int]]:
    """A stand-in server for each named service, answering /healthz and /readyz as its `readiness` says;
    yields the `<service>_port` settings that point `cairn up` at them (a service left out answers nothing)."""
    with ExitStack() as stack:
        ports = {f"{name}_port": free_port() for name in SERVICES}
        for name, check in readiness.items():
            app = create_service_app(service=name, title=name, readiness=check)
            stack.enter_context(serve_in_thread(app, port=ports[f"{name}_port"]))
        yield ports


def up_with_the_services_already_started(cairn: CliSettings, monkeypatch, **options) -> int:
    """`cairn up` past its start of the processes, which the stand-ins replace; its watch ends at once."""
    monkeypatch.setattr(commands, "engines_for", lambda **urls: [])
    monkeypatch.setattr(Supervisor, "check_ports", lambda self: None)  # the stand-ins hold them
    monkeypatch.setattr(Supervisor, "start_all", lambda self: None)
    monkeypatch.setattr(Supervisor, "watch", lambda self, should_stop: None)
    monkeypatch.setattr(commands.demo, "create_demo_user", lambda settings: "demo-password")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return commands.up(cairn, **options)
    finally:
        for stop_signal, handler in handlers.items():
            signal.signal(stop_signal, handler)


def test_a_service_whose_needed_dependency_is_down_is_named_before_the_welcome(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(supervisor, "READY_WINDOW_S", 1.0, raising=False)
    with stand_ins(
        retrieval=reporting(chroma=False, embedder=True, index=False),
        chat=reporting(retrieval=True),
        gateway=reporting(redis=True, chat=True),
    ) as ports:
        cairn = settings(tmp_path, **ports)
        assert up_with_the_services_already_started(cairn, monkeypatch, ingest_demo=True) == 0
    out = capsys.readouterr().out
    retrieval = f"warning: retrieval is not ready: chroma down, index down (see {cairn.log_dir / 'retrieval.log'})\n"
    analytics = f"warning: analytics is not ready: /readyz did not answer (see {cairn.log_dir / 'analytics.log'})\n"
    assert retrieval in out and analytics in out
    assert out.index(retrieval) < out.index("Cairn is up")
    assert "chat is not ready" not in out and "gateway is not ready" not in out
    # The demo collection cannot be looked for without retrieval: skipped, not a failed start.
    assert "demo collection" in out and "cannot start" not in out


def test_a_service_that_connects_a_moment_after_start_gets_no_warning(tmp_path, monkeypatch, capsys):
    with stand_ins(**{name: reporting() for name in SERVICES} | {"analytics": ready_after(2)}) as ports:
        assert up_with_the_services_already_started(settings(tmp_path, **ports), monkeypatch, ingest_demo=False) == 0
    out = capsys.readouterr().out
    assert "warning" not in out and "Cairn is up" in out


def test_the_readiness_check_costs_nothing_when_every_service_is_ready(tmp_path, monkeypatch, capsys):
    with stand_ins(**{name: reporting(dependency=True) for name in SERVICES}) as ports:
        started = time.monotonic()
        assert up_with_the_services_already_started(settings(tmp_path, **ports), monkeypatch, ingest_demo=False) == 0
        assert time.monotonic() - started < 1.0
    assert "warning" not in capsys.readouterr().out


class ClosedTerminal(io.StringIO):
    """Standard output on a terminal that was closed: a write to it fails."""

    def write(self, text: str) -> int:
        raise OSError(errno.EIO, "Input/output error")


def test_closing_the_terminal_stops_the_services_though_nothing_can_be_printed(tmp_path, monkeypatch):
    service = Child(name="chat", service="chat", port=free_port(), command=(sys.executable, "-c", "import time; time.sleep(60)"))
    started = {}

    def start_all(self: Supervisor) -> None:
        self.children = [service]
        self.spawn(service)
        self.write_state()
        started["process"] = self.processes[service.name]

    def watch(self: Supervisor, should_stop) -> None:
        monkeypatch.setattr(sys, "stdout", ClosedTerminal())
        os.kill(os.getpid(), signal.SIGHUP)
        wait_until(should_stop, timeout=5, what="the stop that SIGHUP asks for")

    monkeypatch.setattr(commands, "engines_for", lambda **urls: [])
    monkeypatch.setattr(supervisor, "READY_WINDOW_S", 0.0)
    monkeypatch.setattr(Supervisor, "check_ports", lambda self: None)  # the default ports: whatever holds them
    monkeypatch.setattr(Supervisor, "start_all", start_all)
    monkeypatch.setattr(Supervisor, "watch", watch)
    monkeypatch.setattr(commands.demo, "create_demo_user", lambda settings: "demo-password")
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    cairn = settings(tmp_path)
    try:
        assert commands.up(cairn, ingest_demo=False) == 0
        assert started["process"].poll() is not None, "the service was left running"
        assert not state_file(cairn).exists()
    finally:
        for stop_signal, handler in handlers.items():
            signal.signal(stop_signal, handler)
        if "process" in started:
            started["process"].kill()
            started["process"].wait()
