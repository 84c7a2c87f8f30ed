"""`cairn up` pauses before restarting a process that died, twice as long for each death in a row, so that a
dependency down for a few seconds does not use up every restart at once. The supervisor's clock and sleep
are replaced by a fake one: the pauses are read off it and off the lines it says, never waited out."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cairn.settings import CliSettings
from cairn.supervisor import MAX_RESTARTS, WATCH_INTERVAL_S, Child, StartFailed, Supervisor

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def crashing(name: str) -> Child:
    return Child(name=name, service="chat", port=1, command=(sys.executable, "-c", "raise SystemExit(3)"))


class Recorded:
    """A supervisor of crashing children on a fake clock, with what it said and when it started each."""

    def __init__(self, tmp_path: Path, children: list[Child]) -> None:
        settings = CliSettings(data_dir=tmp_path, replicas="", chroma_server=False, chroma_url=None)
        self.clock = FakeClock()
        self.said: list[tuple[float, str]] = []
        self.spawned: list[tuple[float, str]] = []
        self.supervisor = Supervisor(settings, say=lambda line: self.said.append((self.clock.now, line)))
        self.supervisor.children = children
        self.supervisor.restarts = {child.name: 0 for child in children}
        self.supervisor.clock, self.supervisor.sleep = self.clock, self.clock.sleep
        self._spawn = self.supervisor.spawn
        self.supervisor.spawn = self.spawn_and_let_die
        for child in children:
            self.supervisor.spawn(child)

    def spawn_and_let_die(self, child: Child) -> None:
        """Each run ends before the fake clock moves on: it lasts exactly as long as the fake clock says."""
        self.spawned.append((self.clock.now, child.name))
        self._spawn(child)
        self.supervisor.processes[child.name].wait()

    @property
    def lines(self) -> list[str]:
        return [line for _, line in self.said]


def test_each_restart_in_a_row_waits_twice_as_long_as_the_one_before(tmp_path):
    run = Recorded(tmp_path, [crashing("chat")])
    with pytest.raises(StartFailed, match="chat keeps dying"):
        run.supervisor.watch(should_stop=lambda: False)
    pauses = [1, 2, 4, 8, 16]
    assert len(pauses) == MAX_RESTARTS
    assert run.lines == [
        f"chat exited with code 3; restarting in {pause} s ({n}/{MAX_RESTARTS})" for n, pause in enumerate(pauses, 1)
    ]
    restarted_at = [at for at, _ in run.spawned[1:]]
    for (announced_at, _), started_at, pause in zip(run.said, restarted_at, pauses):
        assert pause <= started_at - announced_at < pause + WATCH_INTERVAL_S
    assert run.clock.now - run.said[0][0] >= sum(pauses)  # the row of deaths spans half a minute, not seconds


def test_a_death_after_a_stable_run_is_restarted_after_the_first_pause_again(tmp_path):
    run = Recorded(tmp_path, [crashing("chat")])
    run.supervisor.stable_after_s = 60
    spawn = run.supervisor.spawn

    def fourth_run_lasts_a_minute(child: Child) -> None:
        spawn(child)
        if len(run.spawned) == 4:
            run.clock.now += 60

    run.supervisor.spawn = fourth_run_lasts_a_minute
    run.supervisor.watch(should_stop=lambda: len(run.said) == 5)
    assert [line.split("; ")[1] for line in run.lines] == [
        "restarting in 1 s (1/5)", "restarting in 2 s (2/5)", "restarting in 4 s (3/5)",
        "restarting in 1 s (1/5)", "restarting in 2 s (2/5)",
    ]


def test_a_stop_asked_during_a_pause_does_not_wait_for_it_nor_for_other_processes_to_restart(tmp_path):
    run = Recorded(tmp_path, [crashing("chat"), crashing("retrieval")])
    run.supervisor.restart_pause_s = 20
    run.supervisor.watch(should_stop=lambda: len(run.said) == 2)  # Ctrl-C once both deaths were announced
    assert run.lines == [
        f"{name} exited with code 3; restarting in 20 s (1/{MAX_RESTARTS})" for name in ("chat", "retrieval")
    ]
    assert run.clock.now <= WATCH_INTERVAL_S  # the second death was seen, and the stop, while the first waited
    assert [name for _, name in run.spawned] == ["chat", "retrieval"]  # neither was restarted


def test_the_pause_grows_no_longer_than_its_cap(tmp_path):
    supervisor = Recorded(tmp_path, []).supervisor
    supervisor.restart_pause_s, supervisor.restart_pause_max_s = 1, 10
    assert [supervisor.restart_pause(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
