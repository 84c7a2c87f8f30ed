"""Fault tests of the event stream with the whole system as real processes (`cairn up`) on a private
RabbitMQ node that is really stopped and started (the shared broker is never touched):

(a) the broker stops; 200 chat requests through the gateway are all answered; the broker starts again
    and analytics holds exactly 200 QuerySubmitted and 200 outcome events for them within 60 s;
(b) with the broker stopped, chat answers and keeps the events in its outbox file; chat is killed with
    SIGKILL, `cairn up` restarts it on the same file, the broker starts, and exactly those events arrive.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import PASSWORD, REPO, UP_TIMEOUT_S, Cairn
from tests.rabbit_node import RabbitNode
from tests.support import free_port, wait_until

pytestmark = pytest.mark.e2e

QUESTIONS = ("How do I add a user?", "How do I list users?", "How are events published?", "What does cairn up do?")
# Two short guides rather than the whole demo collection keep the start short (encoding runs on two busy cores).
GUIDES = ("docs/users-and-roles.md", "docs/events.md")
OUTCOMES = ("ResponseGenerated", "QueryFailed")


@pytest.fixture(scope="module")
def broker() -> Iterator[RabbitNode]:
    node = RabbitNode()
    node.start()
    try:
        yield node
    finally:
        node.cleanup()


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, redis_url: str, broker: RabbitNode) -> Iterator[Cairn]:
    """`cairn up` with its events on the private broker, no per-user chat rate limit and two guides to answer from."""
    name = f"faults-{os.getpid()}-{free_port()}"
    env = {
        **os.environ,
        "CAIRN_DATA_DIR": str(tmp_path_factory.mktemp("cairn-faults")),
        "REDIS_URL": redis_url,
        "REDIS_PREFIX": name,
        "AMQP_URL": broker.url,
        "EVENTS_EXCHANGE": f"{name}.events",
        "ANALYTICS_QUEUE": f"{name}.analytics",
        "CAIRN_DEMO_PASSWORD": PASSWORD,
        "CHAT_REQUESTS_PER_MINUTE": "0",
        **{f"{svc}_PORT": str(free_port()) for svc in ("GATEWAY", "CHAT", "RETRIEVAL", "ANALYTICS")},
    }
    for inherited in ("CHAT_URL", "RETRIEVAL_URL", "ANALYTICS_URL", "LLM_BASE_URL", "OUTBOX_PATH"):
        env.pop(inherited, None)
    cairn = Cairn(env)
    process = subprocess.Popen(
        [sys.executable, "-m", "cairn.cli", "up", "--no-demo-docs"],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    threading.Thread(target=lambda: cairn.output.extend(process.stdout), daemon=True).start()
    try:
        wait_until(
            lambda: any("Cairn is up at" in line for line in cairn.output) or process.poll() is not None,
            timeout=UP_TIMEOUT_S, what="cairn up to print its URL",
        )
        assert process.poll() is None, cairn.logs()
        added = cairn.cli("ingest", *GUIDES)
        assert added.returncode == 0, added.stdout + added.stderr + cairn.logs()
        yield cairn
    finally:
        process.send_signal(signal.SIGTERM)  # as Ctrl-C: the supervisor stops the services in order
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            cairn.cli("down")
            process.kill()


@pytest.fixture
def broker_down(broker: RabbitNode) -> Iterator[RabbitNode]:
    """The broker stopped for the test, and running again after it whatever happened."""
    broker.stop()
    assert not broker.answers()
    try:
        yield broker
    finally:
        broker.start()


def data_dir(cairn: Cairn) -> Path:
    return Path(cairn.env["CAIRN_DATA_DIR"])


def stored(cairn: Cairn, prefix: str) -> dict[str, int]:
    """Rows of analytics' events table for the requests whose id starts with `prefix`, by event type."""
    database = data_dir(cairn) / "analytics.db"
    with closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as db:
        rows = db.execute(
            "SELECT event_type, count(*), count(DISTINCT event_id) FROM events WHERE request_id LIKE ? GROUP BY event_type",
            (f"{prefix}%",),
        ).fetchall()
    assert all(total == distinct for _, total, distinct in rows), rows
    return {event_type: total for event_type, total, _ in rows}


def outcomes(counts: dict[str, int]) -> int:
    return sum(counts.get(t, 0) for t in OUTCOMES)


def wait_for_events(cairn: Cairn, prefix: str, requests: int) -> float:
    """Wait up to 60 s until analytics holds a QuerySubmitted and an outcome for each request; seconds taken."""
    started = time.monotonic()

    def done() -> bool:
        counts = stored(cairn, prefix)
        return counts.get("QuerySubmitted") == requests and outcomes(counts) == requests

    try:
        wait_until(done, timeout=60, interval=0.5, what="the events in analytics")
    except AssertionError:
        raise AssertionError(f"analytics holds {stored(cairn, prefix)} for {requests} requests\n{cairn.logs()}") from None
    return time.monotonic() - started


def in_chat_outbox(cairn: Cairn) -> list[str]:
    """Request ids of the events chat's outbox file holds (one per event)."""
    with closing(sqlite3.connect(data_dir(cairn) / "outbox" / "chat.sqlite3", timeout=5)) as db:
        bodies = [body for (body,) in db.execute("SELECT body FROM outbox ORDER BY id")]
    return [json.loads(body)["request_id"] for body in bodies]


def chat_pid(cairn: Cairn) -> int:
    return json.loads((data_dir(cairn) / "run" / "cairn.json").read_text())["services"]["chat"]


async def ask_all(cairn: Cairn, request_ids: list[str], *, concurrency: int = 8) -> list[int]:
    """Send one chat request per id through the gateway, `concurrency` at a time; their statuses."""
    async with httpx.AsyncClient(base_url=cairn.gateway, timeout=60) as client:
        login = await client.post("/auth/login", json={"username": "demo", "password": PASSWORD})
        assert login.status_code == 200, login.text
        auth = {"Authorization": f"Bearer {login.json()['token']}"}
        gate = asyncio.Semaphore(concurrency)

        async def ask(n: int, request_id: str) -> int:
            async with gate:
                response = await client.post(
                    "/api/chat", json={"query": QUESTIONS[n % len(QUESTIONS)]}, headers={**auth, "X-Request-ID": request_id}
                )
                return response.status_code

        return await asyncio.gather(*(ask(n, rid) for n, rid in enumerate(request_ids)))


@pytest.mark.timeout(150, func_only=True)  # cairn up is bounded on its own
async def test_requests_are_answered_while_the_broker_is_down_and_every_event_arrives(system, broker_down, unique):
    ids = [f"{unique}-a-{n}" for n in range(200)]
    started = time.monotonic()
    statuses = await ask_all(system, ids)
    print(f"200 requests with the broker down in {time.monotonic() - started:.1f}s")
    assert statuses == [200] * 200, f"{sorted(set(statuses))}\n{system.logs()}"
    assert stored(system, unique) == {}  # nothing can have reached analytics yet

    broker_down.start()
    print(f"all 400 events stored {wait_for_events(system, unique, 200):.1f}s after the broker came back")
    time.sleep(1)  # anything more would be a repeat or a stray
    counts = stored(system, unique)
    assert counts["QuerySubmitted"] == 200 and outcomes(counts) == 200, counts
    assert counts.get("ResponseGenerated") == 200, counts  # the offline generator answers every question


@pytest.mark.timeout(120, func_only=True)
async def test_events_in_the_outbox_of_a_killed_chat_arrive_after_its_restart(system, broker_down, unique):
    ids = [f"{unique}-b-{n}" for n in range(20)]
    statuses = await ask_all(system, ids, concurrency=4)
    assert statuses == [200] * 20, system.logs()
    held = in_chat_outbox(system)
    assert sorted(held) == sorted(ids * 2), held  # QuerySubmitted and ResponseGenerated of each, in the file

    killed = chat_pid(system)
    os.kill(killed, signal.SIGKILL)
    assert sorted(in_chat_outbox(system)) == sorted(ids * 2)  # the kill left them in the file
    # The broker starts while cairn up restarts chat: only the new chat process can deliver them.
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(broker_down.start)
        wait_until(lambda: chat_pid(system) != killed, timeout=20, what="cairn up to restart chat")
        chat = f"http://127.0.0.1:{system.env['CHAT_PORT']}/healthz"
        wait_until(lambda: _answers(chat), timeout=60, what=f"the restarted chat\n{system.logs()}")
        starting.result(timeout=90)
    wait_for_events(system, unique, 20)
    time.sleep(1)  # anything more would be a repeat or a stray
    assert stored(system, unique) == {"QuerySubmitted": 20, "ResponseGenerated": 20}
    wait_until(lambda: not in_chat_outbox(system), timeout=10, what="chat's outbox to be emptied")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
