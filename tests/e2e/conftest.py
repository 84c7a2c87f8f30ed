"""The whole system as real processes, started the way a user starts it (`cairn up`), once for every
e2e test module: on free loopback ports, with a temporary data directory and its own Redis prefix,
exchange and queue."""
from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from filelock import FileLock
from playwright.sync_api import Browser, sync_playwright

from tests.support import free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
PASSWORD = "e2e-demo-password"
# How long `cairn up` may take to print its URL. Adding the demo collection took 70 s while the other test
# worker was busy, the services' start 15 s more; a machine 2.5 times slower needs over 200 s.
UP_TIMEOUT_S = 420


class Cairn:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.gateway = f"http://127.0.0.1:{env['GATEWAY_PORT']}"
        self.output: list[str] = []

    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "cairn.cli", *args],
            env=self.env, cwd=REPO, input=stdin, capture_output=True, text=True, timeout=120,
        )

    def logs(self) -> str:
        log_dir = Path(self.env["CAIRN_DATA_DIR"]) / "logs"
        tails = [f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-30:]) for p in sorted(log_dir.glob("*.log"))]
        return "\n".join(["--- cairn up", *self.output[-30:], *tails])


def cairn_env(data_dir: Path, redis_url: str, amqp_url: str, *, name: str) -> dict[str, str]:
    """The environment of a private Cairn: its own data directory, free ports, Redis prefix, exchange and queue."""
    env = {
        **os.environ,
        "CAIRN_DATA_DIR": str(data_dir),
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": name,
        "AMQP_URL": amqp_url,
        "EVENTS_EXCHANGE": f"{name}.events",
        "ANALYTICS_QUEUE": f"{name}.analytics",
        "CAIRN_DEMO_PASSWORD": PASSWORD,
        **{f"{svc}_PORT": str(free_port()) for svc in ("GATEWAY", "CHAT", "RETRIEVAL", "ANALYTICS", "CHROMA")},
    }
    for inherited in (
        "CHAT_URL", "RETRIEVAL_URL", "ANALYTICS_URL", "CHAT_URLS", "RETRIEVAL_URLS", "CHROMA_URL", "LLM_BASE_URL",
        "OUTBOX_PATH", "CAIRN_REPLICAS", "CAIRN_REPLICA_PORT_STEP", "CAIRN_CHROMA_SERVER",
    ):
        env.pop(inherited, None)
    return env


@contextmanager
def running_cairn(env: dict[str, str], *up_args: str) -> Iterator[Cairn]:
    """`cairn up [up_args]` until the block ends, then `cairn down`."""
    system = Cairn(env)
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "up", *up_args],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    reader = threading.Thread(target=lambda: system.output.extend(process.stdout), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: any("Cairn is up at" in line for line in system.output) or process.poll() is not None,
            timeout=UP_TIMEOUT_S, what="cairn up to print its URL",
        )
        assert process.poll() is None, system.logs()
        yield system
    finally:
        result = system.cli("down")
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        assert result.returncode == 0, result.stdout + result.stderr


EMBEDDING_CACHE = "embedding-cache.sqlite3"  # in the data directory (services/retrieval/settings.py)


@pytest.fixture(scope="session")
def cairn(tmp_path_factory, redis_url, amqp_url) -> Iterator[Cairn]:
    data_dir = tmp_path_factory.mktemp("cairn-data")
    env = cairn_env(data_dir, redis_url, amqp_url, name=f"e2e-{os.getpid()}-{free_port()}") | {"EMBEDDING_CACHE": "1"}
    # Each test worker runs a Cairn of its own, and the first run of `cairn up` encodes the demo documents (over
    # a minute, twice as long with both workers encoding at once). They take turns instead: the first keeps its
    # embedding cache for the others, whose `cairn up` then reads the vectors (the file is keyed by model and text).
    this_run = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker has a folder of its own in the run's
        this_run = this_run.parent
    shared = this_run / f"e2e-{EMBEDDING_CACHE}"
    with contextlib.ExitStack() as running:
        with FileLock(f"{shared}.lock"):
            if shared.exists():
                shutil.copyfile(shared, data_dir / EMBEDDING_CACHE)
            system = running.enter_context(running_cairn(env))
            if not shared.exists():
                _copy_sqlite(data_dir / EMBEDDING_CACHE, shared)
        yield system


def _copy_sqlite(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite file another process may be writing (its WAL included)."""
    if not source.exists():
        return
    partial = target.with_suffix(".partial")
    with contextlib.closing(sqlite3.connect(source)) as reading, contextlib.closing(sqlite3.connect(partial)) as copy:
        reading.backup(copy)
    partial.replace(target)


# Debian's chromium, driven by Playwright (never `playwright install`: it would download a browser).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


# The text of an element on one line as it is drawn, left to right: how a reader sees it after the
# bidi algorithm has run (an override character, U+202E, draws the text after it reversed).
DRAWN_TEXT = """(element) => {
  const drawn = [];
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const box = range.getBoundingClientRect();
      if (box.width > 0) drawn.push([box.left, node.data[i]]);
    }
  }
  return drawn.sort((a, b) => a[0] - b[0]).map(([, c]) => c).join("");
}"""
