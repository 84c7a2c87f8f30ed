"""What `cairn up` records of the processes it runs (CAIRN_DATA_DIR/run/cairn.json), and which of them
still run.

A process is known by its pid and its start time: after a crash, a `kill -9` or a reboot, a recorded pid
may name another program by the time the file is read, and `cairn down` must never signal that one.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import IO

import psutil
from pydantic import BaseModel, ValidationError

from cairn.settings import CliSettings


def state_file(settings: CliSettings) -> Path:
    return settings.run_dir / "cairn.json"


def hold_run_lock(settings: CliSettings) -> IO[str] | None:
    """The lock one `cairn up` per data directory holds while it runs, with its pid written in; None while
    another process holds it. Unlike the state file, which is written only once the services are spawned, it
    is taken at once, so that two `cairn up` started together do not both start; the system releases it
    when its holder ends, killed too."""
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    handle = (settings.run_dir / "cairn.lock").open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def run_lock_holder(settings: CliSettings) -> int | None:
    """The pid the holder of the run lock wrote, if it has yet."""
    try:
        return int((settings.run_dir / "cairn.lock").read_text())
    except (OSError, ValueError):
        return None


class RunState(BaseModel):
    supervisor: int
    services: dict[str, int]
    urls: dict[str, str]
    started: dict[str, float | None] = {}  # older versions wrote none


class UnreadableState(Exception):
    """The state file is there, but cannot be read or is not what `cairn up` writes."""


def read_state(settings: CliSettings) -> dict | None:
    """The state of the last `cairn up`, None when there is no state file."""
    path = state_file(settings)
    try:
        return RunState.model_validate_json(path.read_bytes()).model_dump()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableState(f"{path}: {exc.strerror or exc}") from exc
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error["loc"]))
        raise UnreadableState(f"{path}: {where + ': ' if where else ''}{error['msg']}") from exc


def stale_state() -> dict:
    """What an unreadable state file is taken for: a `cairn up` that no longer runs and left nothing running."""
    return {"supervisor": None, "services": {}, "urls": {}, "started": {}}


def write_state(settings: CliSettings, *, supervisor: int, services: dict[str, int], urls: dict[str, str]) -> None:
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    started = {str(pid): _running_since(pid) for pid in (supervisor, *services.values())}
    state = {"supervisor": supervisor, "services": services, "urls": urls, "started": started}
    # Whole or not at all: the supervisor rewrites it after each restart, and a `cairn down` reading it half
    # written would take Cairn for stopped.
    path = state_file(settings)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(state))
    partial.replace(path)


def still_running(state: dict, pid: int) -> bool:
    """Whether the recorded process `pid` runs: that pid, started when the file says. A pid the file
    holds no start time for (written by an older version) is never taken for Cairn's."""
    recorded = state.get("started", {}).get(str(pid))
    return recorded is not None and _running_since(pid) == recorded


def pid_alive(pid: int) -> bool:
    """True while the process runs; a zombie (exited, not yet reaped by its parent) counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _running_since(pid: int) -> float | None:
    """The process's start time while it runs (not a zombie), else None."""
    try:
        process = psutil.Process(pid)
        return None if process.status() == psutil.STATUS_ZOMBIE else process.create_time()
    except psutil.Error:
        return None
