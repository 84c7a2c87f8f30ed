"""`cairn down` and `cairn up` trust a recorded process only while it is the one `cairn up` started (same pid,
same start time), and deal with the services a killed supervisor left running."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cairn import commands
from cairn.engines import EngineMissing
from cairn.run_state import pid_alive, read_state, state_file, write_state
from cairn.settings import CliSettings
from tests.support import wait_until

pytestmark = pytest.mark.unit


def settings(tmp_path: Path) -> CliSettings:
    return CliSettings(data_dir=tmp_path, replicas="", chroma_server=False, chroma_url=None)


def sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


# Notes its name in the file `argv[2]` when asked to stop, `argv[3]` seconds later (a service finishing its
# requests), and exits; `argv[1]` is a file it creates once it listens for the signal.
STOP_RECORDER = """
import signal, sys, time
def stop(signum, frame):
    time.sleep(float(sys.argv[3]))
    with open(sys.argv[2], "a") as log:
        log.write(sys.argv[4] + "\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def stop_recorder(tmp_path: Path, name: str, *, stopping_takes_s: float) -> subprocess.Popen:
    ready = tmp_path / f"{name}.ready"
    process = subprocess.Popen(
        [sys.executable, "-c", STOP_RECORDER, str(ready), str(tmp_path / "stopped"), str(stopping_takes_s), name]
    )
    wait_until(ready.exists, timeout=10, what=f"{name} stand-in to start")
    return process


def gone_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


def test_down_leaves_alone_a_program_that_now_holds_a_recorded_pid(tmp_path):
    cairn, stranger = settings(tmp_path), sleeper()
    try:
        write_state(cairn, supervisor=stranger.pid, services={"chat": stranger.pid}, urls={})
        # As after a crash and a reboot: the pid is now the stranger's, the start time the one Cairn's process had.
        state = json.loads(state_file(cairn).read_text())
        state["started"][str(stranger.pid)] -= 3600
        state_file(cairn).write_text(json.dumps(state))
        assert commands.down(cairn, timeout_s=1) == 0
        assert stranger.poll() is None and not state_file(cairn).exists()
        write_state(cairn, supervisor=stranger.pid, services={}, urls={})
        assert commands.up(cairn) == 1, "the recorded supervisor really runs: Cairn is already up"
    finally:
        stranger.kill()
        stranger.wait()


def test_the_services_of_a_killed_supervisor_are_asked_to_stop_and_block_a_new_up(tmp_path, capsys):
    cairn, chat, gateway = settings(tmp_path), sleeper(), sleeper()
    try:
        write_state(cairn, supervisor=gone_pid(), services={"chat": chat.pid, "gateway": gateway.pid}, urls={})
        assert commands.up(cairn) == 1
        assert f"chat (pid {chat.pid}), gateway (pid {gateway.pid})" in capsys.readouterr().err
        started = time.monotonic()
        assert commands.down(cairn, timeout_s=20) == 0
        assert time.monotonic() - started < 10, "SIGTERM, not the timeout and SIGKILL"
        assert (chat.wait(5), gateway.wait(5)) == (-signal.SIGTERM, -signal.SIGTERM)
        assert not state_file(cairn).exists()
    finally:
        for process in (chat, gateway):
            process.kill()
            process.wait()


def test_without_its_supervisor_the_chroma_server_is_stopped_after_the_retrieval_that_uses_it(tmp_path):
    # A retrieval replica still stopping when the Chroma server went retried it until `cairn down` killed it.
    cairn = settings(tmp_path)
    chroma = stop_recorder(tmp_path, "chroma", stopping_takes_s=0)
    retrieval = stop_recorder(tmp_path, "retrieval", stopping_takes_s=1)
    try:
        write_state(cairn, supervisor=gone_pid(), services={"chroma": chroma.pid, "retrieval": retrieval.pid}, urls={})
        assert commands.down(cairn, timeout_s=20) == 0
        assert (retrieval.wait(5), chroma.wait(5)) == (0, 0), "each stopped on SIGTERM, none was killed"
        assert (tmp_path / "stopped").read_text().split() == ["retrieval", "chroma"]
    finally:
        for process in (chroma, retrieval):
            process.kill()
            process.wait()


def test_a_state_file_without_start_times_names_no_process_of_cairn(tmp_path):
    cairn, stranger = settings(tmp_path), sleeper()
    try:
        cairn.run_dir.mkdir(parents=True)
        state_file(cairn).write_text(f'{{"supervisor": {stranger.pid}, "services": {{"chat": {stranger.pid}}}, "urls": {{}}}}')
        assert commands.down(cairn, timeout_s=1) == 0
        assert pid_alive(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.parametrize("content", ['{"foo": 1}', "[1, 2]", '{"supervisor": "x", "services": {}, "urls": {}}', "not json{"])
def test_a_state_file_not_written_by_cairn_up_is_named_and_taken_as_stale(tmp_path, monkeypatch, capsys, content):
    cairn = settings(tmp_path)
    cairn.run_dir.mkdir(parents=True)
    state_file(cairn).write_text(content)
    warning = f"warning: unreadable state file, taken as stale: {state_file(cairn)}: "

    assert commands.status(cairn) == 1
    output = capsys.readouterr()
    assert output.err.startswith(warning) and output.err.count("\n") == 1
    assert "the `cairn up` that started these is not running" in output.out

    def no_engines(**urls):  # `cairn up` got past the state file: stop it before it starts anything
        raise EngineMissing("stopped by the test")

    monkeypatch.setattr(commands, "engines_for", no_engines)
    assert commands.up(cairn) == 1
    first, *rest = capsys.readouterr().err.splitlines()
    assert first.startswith(warning) and rest == ["cannot start: stopped by the test"]

    assert commands.down(cairn, timeout_s=1) == 0
    output = capsys.readouterr()
    assert output.err.startswith(warning) and output.out == "Cairn stopped.\n"
    assert not state_file(cairn).exists()


def test_a_state_file_that_cannot_be_removed_is_one_line_and_status_1_not_a_traceback(tmp_path, capsys):
    cairn = settings(tmp_path)
    state_file(cairn).mkdir(parents=True)  # a folder where the file belongs: read and removed alike fail
    assert commands.down(cairn, timeout_s=1) == 1
    output = capsys.readouterr()
    assert output.out == ""
    assert output.err.splitlines() == [
        f"warning: unreadable state file, taken as stale: {state_file(cairn)}: Is a directory",
        f"error: cannot remove the state file {state_file(cairn)}: Is a directory",
    ]


# A `cairn up` of the data directory `argv[1]` that is still starting Redis, long before its state file.
UP_STARTING_REDIS = """
import sys, time
from cairn import commands
from cairn.settings import CliSettings

def starting_redis(**urls):
    print("starting Redis", flush=True)
    time.sleep(60)
    return []

commands.engines_for = starting_redis
commands.up(CliSettings(data_dir=sys.argv[1], replicas="", chroma_server=False, chroma_url=None))
"""


def test_a_second_up_started_with_the_first_is_refused_though_no_state_file_is_written_yet(tmp_path, monkeypatch, capsys):
    # Both went on to start their services: one set died on the ports the other held, and the state file of the
    # one left running was removed by the one that gave up, so that `cairn down` could not stop it.
    cairn = settings(tmp_path)

    def no_engines(**urls):  # `cairn up` got past the check: stop it before it starts anything
        raise EngineMissing("stopped by the test")

    monkeypatch.setattr(commands, "engines_for", no_engines)
    first = subprocess.Popen([sys.executable, "-c", UP_STARTING_REDIS, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline() == "starting Redis\n"
        assert not state_file(cairn).exists()
        assert commands.up(cairn) == 1
        assert capsys.readouterr().err == f"Cairn is already running (pid {first.pid}); `cairn status` or `cairn down`.\n"
    finally:
        first.kill()
        first.wait()
    assert commands.up(cairn) == 1, "the lock of a killed `cairn up` goes with it"
    assert capsys.readouterr().err == "cannot start: stopped by the test\n"


def test_a_state_file_being_rewritten_is_read_whole_never_half_written(tmp_path):
    # The supervisor rewrites it after every restart; a `cairn down` reading it half written took Cairn for
    # stopped (an unreadable file is stale) and stopped nothing.
    settings_ = settings(tmp_path)
    write_state(settings_, supervisor=1, services={}, urls={})
    done, unreadable = threading.Event(), []

    def rewrite() -> None:
        for _ in range(2000):
            write_state(settings_, supervisor=1, services={}, urls={"gateway": "http://127.0.0.1:8000"})
        done.set()

    writer = threading.Thread(target=rewrite)
    writer.start()
    while not done.is_set():
        try:
            read_state(settings_)
        except Exception as exc:
            unreadable.append(exc)
    writer.join()
    assert not unreadable, unreadable[0]
