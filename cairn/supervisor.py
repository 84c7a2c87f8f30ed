"""Runs the services (and their replicas, and a Chroma server for shared retrieval) as child processes,
restarts one that dies, stops them all together."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cairn.run_state import state_file, write_state
from cairn.settings import SERVICES, CliSettings

MAX_RESTARTS = 5
STABLE_AFTER_S = 60.0  # a process that ran this long before dying starts its count of restarts afresh
# The pause before the first restart in a row, doubled before each further one (1, 2, 4, 8, 16 s), so
# that a dependency down for half a minute does not use up every restart within seconds.
RESTART_PAUSE_S = 1.0
RESTART_PAUSE_MAX_S = 30.0
WATCH_INTERVAL_S = 0.5  # also how long a stop asked during a pause waits at most
READY_WINDOW_S = 10.0  # a service may connect to a dependency a moment after it first answers /healthz
CHROMA = "chroma"


class StartFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Child:
    """One process `cairn up` runs: a service replica (`chat`, `chat-2`, ...) or the Chroma server."""

    name: str
    service: str
    port: int
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)  # on top of the environment every child shares

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def health_url(self) -> str:
        return f"{self.url}/api/v2/heartbeat" if self.service == CHROMA else f"{self.url}/healthz"

    @property
    def ready_url(self) -> str:
        return f"{self.url}/readyz"

    @property
    def first_replica(self) -> bool:
        return self.name == self.service


def replica_name(service: str, n: int) -> str:
    return service if n == 1 else f"{service}-{n}"


def replica_urls(settings: CliSettings, service: str) -> list[str]:
    return [f"http://127.0.0.1:{settings.replica_port(service, n)}" for n in range(1, settings.replicas_of(service) + 1)]


def chroma_url(settings: CliSettings) -> str:
    return f"http://127.0.0.1:{settings.chroma_port}"


def shared_env(settings: CliSettings) -> dict[str, str]:
    """What every child is told about the others: the first replica's port and URL, and every replica's URL."""
    env = {"CAIRN_DATA_DIR": str(settings.data_dir.resolve())}
    for name in SERVICES:
        env[f"{name.upper()}_PORT"] = str(settings.port_of(name))
        env[f"{name.upper()}_URL"] = settings.local_url_of(name)
    env["CHAT_URLS"] = ",".join(replica_urls(settings, "chat"))
    env["RETRIEVAL_URLS"] = ",".join(replica_urls(settings, "retrieval"))
    if settings.runs_chroma_server:
        env["CHROMA_URL"] = chroma_url(settings)
    return env


def plan(settings: CliSettings, *, chroma_command: str = CHROMA) -> list[Child]:
    """The children in start order: the Chroma server (when retrieval shares one), retrieval, analytics,
    chat, gateway. Replica n from 2 listens on its own port and keeps its events in its own outbox file."""
    children = []
    if settings.runs_chroma_server:
        command = (chroma_command, "run", "--path", str(settings.chroma_server_dir.resolve()),
                   "--host", "127.0.0.1", "--port", str(settings.chroma_port))
        children.append(Child(CHROMA, CHROMA, settings.chroma_port, command))
    for service in SERVICES:
        for n in range(1, settings.replicas_of(service) + 1):
            name, port = replica_name(service, n), settings.replica_port(service, n)
            env = {f"{service.upper()}_PORT": str(port)}
            if n > 1:
                env["OUTBOX_PATH"] = str((settings.data_dir / "outbox" / f"{name}.sqlite3").resolve())
            children.append(Child(name, service, port, (sys.executable, "-m", f"services.{service}"), env))
    _refuse_shared_ports(children)
    return children


def _refuse_shared_ports(children: list[Child]) -> None:
    owners: dict[int, str] = {}
    for child in children:
        if not 0 < child.port < 65536:
            raise StartFailed(f"{child.name} would listen on port {child.port}, which does not exist")
        if child.port in owners:
            raise StartFailed(
                f"{child.name} would listen on port {child.port}, which {owners[child.port]} uses; "
                "change the service ports or CAIRN_REPLICA_PORT_STEP"
            )
        owners[child.port] = child.name


def find_chroma_command() -> str:
    """The `chroma` command of this Python's environment (package chromadb), else the one on the PATH."""
    found = shutil.which(CHROMA, path=str(Path(sys.executable).parent)) or shutil.which(CHROMA)
    if found is None:
        raise StartFailed("a Chroma server is needed but the `chroma` command is missing (pip install chromadb)")
    return found


class Supervisor:
    def __init__(self, settings: CliSettings, *, say: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.say = say
        chroma_command = find_chroma_command() if settings.runs_chroma_server else CHROMA
        self.children = plan(settings, chroma_command=chroma_command)
        self.processes: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = {child.name: 0 for child in self.children}
        self.started_at: dict[str, float] = {}
        self.restart_at: dict[str, float] = {}  # the processes that died and wait out their pause
        self.log_starts: dict[str, int] = {}
        self.stable_after_s = STABLE_AFTER_S
        self.restart_pause_s = RESTART_PAUSE_S
        self.restart_pause_max_s = RESTART_PAUSE_MAX_S
        self.clock: Callable[[], float] = time.monotonic
        self.sleep: Callable[[float], None] = time.sleep
        self.ready_window_s = READY_WINDOW_S
        self._env = {**os.environ, **shared_env(settings)}

    def describe(self) -> str:
        """What starts, as `starting ...` names it: `gateway, chat, retrieval and analytics` without replicas."""
        if len(self.children) == len(SERVICES):
            return "gateway, chat, retrieval and analytics"
        counts = {child.service: 0 for child in reversed(self.children)}
        for child in self.children:
            counts[child.service] += 1
        parts = [
            "a Chroma server" if service == CHROMA else f"{count} x {service}" if count > 1 else service
            for service, count in counts.items()
        ]
        return f"{', '.join(parts[:-1])} and {parts[-1]}"

    def spawn(self, child: Child) -> None:
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path(child.name), "ab")
        self.log_starts[child.name] = log.seek(0, os.SEEK_END)  # the log is kept across runs: this run's part
        self.started_at[child.name] = self.clock()
        with _stop_signals_held():  # a stop asked meanwhile waits until the child is recorded, to be stopped too
            self.processes[child.name] = subprocess.Popen(
                list(child.command),
                env={**self._env, **child.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches only us; we stop the children in order
                preexec_fn=_take_stop_signals,  # a child inherits the mask held here: it would ignore SIGTERM
            )
        log.close()

    def check_ports(self) -> None:
        """StartFailed naming the first port another program (or a Cairn) holds: else the service would die at
        start, saying why only in its log."""
        for child in self.children:
            if _answers(child.health_url):
                raise StartFailed(
                    f"port {child.port} for {child.name} is already taken (is Cairn already running? try `cairn status`)"
                )
            if not _port_free(child.port):
                raise StartFailed(f"port {child.port} for {child.name} is used by another program")

    def start_all(self) -> None:
        self.check_ports()
        # Retrieval opens its collection as it starts: the Chroma server must answer first.
        servers = [child for child in self.children if child.service == CHROMA]
        services = [child for child in self.children if child.service != CHROMA]
        for group in (servers, services):
            for child in group:
                self.spawn(child)
            self.write_state()
            self.wait_healthy(group)

    def wait_healthy(self, children: list[Child]) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        pending = list(children)
        while pending:
            for child in list(pending):
                process = self.processes[child.name]
                if process.poll() is not None:
                    log = self.log_path(child.name)
                    problems = _settings_problems_in(log, since=self.log_starts.get(child.name, 0))
                    reasons = "".join(f"\n  {line}" for line in problems)
                    raise StartFailed(f"{child.name} exited with code {process.returncode}; see {log}{reasons}")
                if _answers(child.health_url):
                    pending.remove(child)
            if time.monotonic() > deadline:
                names = ", ".join(child.name for child in pending)
                raise StartFailed(f"{names} did not answer within {self.settings.start_timeout_s:.0f}s")
            time.sleep(0.3)

    def not_ready(self) -> dict[str, str]:
        """The services whose /readyz still says not ready after up to `ready_window_s`, each with what is
        down, as `chroma down`. The Chroma server has no /readyz: its heartbeat answered already."""
        deadline = time.monotonic() + self.ready_window_s
        pending = [child for child in self.children if child.service != CHROMA]
        while True:
            down = {child.name: what for child in pending if (what := _what_is_down(child.ready_url))}
            pending = [child for child in pending if child.name in down]
            if not pending or time.monotonic() >= deadline:
                return down
            time.sleep(0.3)

    def log_path(self, name: str) -> Path:
        return self.settings.log_dir / f"{name}.log"

    def watch(self, should_stop: Callable[[], bool]) -> None:
        """Until asked to stop: restart a process that died, after a pause that doubles with each death in a
        row, up to MAX_RESTARTS times in a row each (a process that ran for `stable_after_s` before it died
        starts a new row). A process waiting out its pause does not hold up the others, nor a stop."""
        while not should_stop():
            for child in self.children:
                if child.name in self.restart_at:
                    self._restart_when_due(child)
                elif self.processes[child.name].poll() is not None:
                    self._schedule_restart(child)
            self.sleep(WATCH_INTERVAL_S)

    def _schedule_restart(self, child: Child) -> None:
        process = self.processes[child.name]
        if self.clock() - self.started_at[child.name] >= self.stable_after_s:
            self.restarts[child.name] = 0
        if self.restarts[child.name] >= MAX_RESTARTS:
            raise StartFailed(
                f"{child.name} keeps dying (exit code {process.returncode}); see {self.log_path(child.name)}"
            )
        self.restarts[child.name] += 1
        pause = self.restart_pause(self.restarts[child.name])
        self.restart_at[child.name] = self.clock() + pause
        self.say(
            f"{child.name} exited with code {process.returncode}; "
            f"restarting in {pause:g} s ({self.restarts[child.name]}/{MAX_RESTARTS})"
        )

    def restart_pause(self, restart: int) -> float:
        """The pause before the `restart`th restart in a row (from 1)."""
        return min(self.restart_pause_s * 2 ** (restart - 1), self.restart_pause_max_s)

    def _restart_when_due(self, child: Child) -> None:
        if self.clock() < self.restart_at[child.name]:
            return
        del self.restart_at[child.name]
        self.spawn(child)
        self.write_state()

    def stop_all(self, timeout_s: float = 15.0) -> None:
        # The gateway first, so no new work comes in; the Chroma server last, once retrieval has stopped.
        services = [child for child in reversed(self.children) if child.service != CHROMA]
        servers = [child for child in self.children if child.service == CHROMA]
        for group in (services, servers):
            running = [self.processes[c.name] for c in group if c.name in self.processes]
            for process in running:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for process in running:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        state_file(self.settings).unlink(missing_ok=True)

    def write_state(self) -> None:
        write_state(
            self.settings,
            supervisor=os.getpid(),
            services={name: process.pid for name, process in self.processes.items()},
            urls={child.name: child.url for child in self.children},
        )


@contextmanager
def _stop_signals_held() -> Iterator[None]:
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _take_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _answers(health_url: str) -> bool:
    try:
        return httpx.get(health_url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _settings_problems_in(log: Path, *, since: int) -> list[str]:
    """The `<service>: cannot start: VARIABLE: ...` lines a service printed, from byte `since` of its log on."""
    try:
        with log.open("rb") as handle:
            handle.seek(since)
            lines = handle.read(65536).decode(errors="replace").splitlines()
    except OSError:
        return []
    return [line.strip() for line in lines if ": cannot start: " in line]


def _what_is_down(ready_url: str) -> str | None:
    """None when the service is ready; else the checks its /readyz reports down."""
    try:
        response = httpx.get(ready_url, timeout=2)
    except httpx.HTTPError:
        return "/readyz did not answer"
    if response.status_code == 200:
        return None
    try:
        checks = response.json().get("checks", {})
    except ValueError:
        checks = {}
    down = [name for name, up in checks.items() if not up]
    return ", ".join(f"{name} down" for name in down) or f"/readyz answered {response.status_code}"


def _port_free(port: int) -> bool:
    """Whether a server could listen on the loopback port now (as uvicorn does, reusing a closing one)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
