"""A backstop behind pytest-timeout, so no stuck test can hold the run for good.

pytest-timeout (method signal, test bodies only: see pyproject.toml) fails a test that outlives its timeout
by raising inside it, once: a clean-up that then sticks as well (a browser driver interrupted mid-call, a
process waited on without a limit) has no timeout left, nor has a fixture's set-up, and its worker, with every
test queued on it, would wait until CI gives up, printing nothing. Here each phase of a test (setup, call,
teardown) gets a hard limit GRACE_S past that timeout: when it passes, every thread's stack is printed to
the terminal and the worker ends; `make test` tells pytest-xdist not to replace it, so the run ends with
the test reported as crashed and the log saying where it stuck.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

# Past the test's own timeout: a set-up bounded by its own waits (`cairn up` may take UP_TIMEOUT_S, 420 s, in
# tests/e2e/conftest.py) must fit, as must pytest-timeout's failure and a normal clean-up.
GRACE_S = 300.0


def _hard_limit_s(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker and marker.args:
        timeout = marker.args[0]
    else:  # --timeout on the command line, else the ini file's
        timeout = item.config.getoption("timeout", None) or item.config.getini("timeout")
    return float(timeout) + GRACE_S if timeout and float(timeout) > 0 else None


def _end_worker(item: pytest.Item, phase: str, limit_s: float) -> None:
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)  # print to the real terminal, not into the captured output
    sys.stderr.write(f"\n{item.nodeid}: {phase} still running after {limit_s:.0f} s; stacks of every thread:\n")
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@contextmanager
def _bounded(item: pytest.Item, phase: str) -> Iterator[None]:
    limit_s = _hard_limit_s(item)
    if limit_s is None:
        yield
        return
    timer = threading.Timer(limit_s, _end_worker, args=(item, phase, limit_s))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _bounded(item, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _bounded(item, "call"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    with _bounded(item, "teardown"):
        return (yield)
