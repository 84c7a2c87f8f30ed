"""Runs the four services as child processes, restarts one that dies, stops them all together."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from cairn.settings import SERVICES, CliSettings

MAX_RESTARTS = 5


class StartFailed(RuntimeError):
    pass


class Supervisor:
    def __init__(self, settings: CliSettings, *, say: Callable[[str], None] = print) -> None:
        self.settings = settings
        self.say = say
        self.processes: dict[str, subprocess.Popen] = {}
        self.restarts: dict[str, int] = {name: 0 for name in SERVICES}

    def child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CAIRN_DATA_DIR"] = str(self.settings.data_dir.resolve())
        for name in SERVICES:
            env[f"{name.upper()}_PORT"] = str(self.settings.port_of(name))
            env[f"{name.upper()}_URL"] = self.settings.local_url_of(name)
        return env

    def spawn(self, name: str) -> None:
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.settings.log_dir / f"{name}.log", "ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"],
            env=self.child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches only us; we stop the children in order
        )
        log.close()

    def start_all(self) -> None:
        for name in SERVICES:
            port = self.settings.port_of(name)
            if _answers(self.settings.local_url_of(name)):
                raise StartFailed(f"port {port} for {name} is already taken (is Cairn already running? try `cairn status`)")
        for name in SERVICES:
            self.spawn(name)
        self.write_state()
        self.wait_healthy()

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        pending = list(SERVICES)
        while pending:
            for name in list(pending):
                process = self.processes[name]
                if process.poll() is not None:
                    raise StartFailed(f"{name} exited with code {process.returncode}; see {self.log_path(name)}")
                if _answers(self.settings.local_url_of(name)):
                    pending.remove(name)
            if time.monotonic() > deadline:
                raise StartFailed(f"{', '.join(pending)} did not answer within {self.settings.start_timeout_s:.0f}s")
            time.sleep(0.3)

    def log_path(self, name: str) -> Path:
        return self.settings.log_dir / f"{name}.log"

    def watch(self, should_stop: Callable[[], bool]) -> None:
        """Until asked to stop: restart a service that died, up to MAX_RESTARTS times."""
        while not should_stop():
            for name, process in list(self.processes.items()):
                if process.poll() is None:
                    continue
                if self.restarts[name] >= MAX_RESTARTS:
                    raise StartFailed(f"{name} keeps dying (exit code {process.returncode}); see {self.log_path(name)}")
                self.restarts[name] += 1
                self.say(f"{name} exited with code {process.returncode}; restarting ({self.restarts[name]}/{MAX_RESTARTS})")
                self.spawn(name)
                self.write_state()
            time.sleep(0.5)

    def stop_all(self, timeout_s: float = 15.0) -> None:
        for name in reversed(SERVICES):  # the gateway first, so no new work comes in
            process = self.processes.get(name)
            if process and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        state_file(self.settings).unlink(missing_ok=True)

    def write_state(self) -> None:
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        state = {"supervisor": os.getpid(), "services": {n: p.pid for n, p in self.processes.items()}}
        state_file(self.settings).write_text(json.dumps(state))


def state_file(settings: CliSettings) -> Path:
    return settings.run_dir / "cairn.json"


def read_state(settings: CliSettings) -> dict | None:
    try:
        return json.loads(state_file(settings).read_text())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True while the process runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (not Linux), or the process just went
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"  # the state follows the command name in parentheses


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
