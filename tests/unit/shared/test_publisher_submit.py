"""`submit` with no broker at all: it returns at once, keeps the event in the file, and never raises."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from shared.broker import RabbitEventPublisher
from shared.events import QuerySubmitted, QuerySubmittedData
from shared.outbox import Outbox, open_outbox
from tests.support import free_port

pytestmark = pytest.mark.unit


def question(n: int) -> QuerySubmitted:
    return QuerySubmitted(source_service="chat", request_id=f"r{n}", data=QuerySubmittedData(query=f"question {n}"))


def nowhere() -> str:
    return f"amqp://guest:guest@127.0.0.1:{free_port()}/"


def publisher(path: Path, **overrides) -> RabbitEventPublisher:
    outbox = open_outbox(path=path, max_events=overrides.pop("max_events", 1000), service="unit-submit")
    return RabbitEventPublisher(amqp_url=nowhere(), exchange="x.events", queue="x.analytics", outbox=outbox, **overrides)


async def test_submit_keeps_the_event_in_the_file_without_touching_the_broker(tmp_path: Path) -> None:
    path = tmp_path / "chat.sqlite3"
    events = publisher(path)
    await events.start()
    started = time.perf_counter()
    for n in range(50):
        events.submit(question(n))
    assert time.perf_counter() - started < 0.05  # 50 durable appends, no network
    assert events.backlog == 50
    closing = time.perf_counter()
    await events.close(timeout=0.5)
    assert time.perf_counter() - closing < 2.5
    assert events.published == 0

    held = open_outbox(path=path, max_events=1000, service="unit-submit").oldest(100)
    assert [QuerySubmitted.model_validate_json(e.body).request_id for e in held] == [f"r{n}" for n in range(50)]
    first = held[0]
    assert (first.exchange, first.routing_key, first.event_type) == ("x.events", "analytics.query.submitted", "QuerySubmitted")
    assert first.event_id == str(QuerySubmitted.model_validate_json(first.body).event_id)


async def test_a_full_outbox_does_not_fail_the_caller(tmp_path: Path) -> None:
    events = publisher(tmp_path / "chat.sqlite3", max_events=2)
    for n in range(5):
        events.submit(question(n))  # the last three are refused, logged and counted
    assert events.backlog == 2
    await events.close(timeout=0)


class BrokenOutbox(Outbox):
    def put(self, event) -> bool:
        raise RuntimeError("an outbox bug")


async def test_submit_never_raises() -> None:
    events = RabbitEventPublisher(
        amqp_url=nowhere(), exchange="x", queue=None, outbox=BrokenOutbox(durable=None, max_events=10, service="unit-broken")
    )
    events.submit(question(1))
    assert events.backlog == 0


def test_a_window_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        publisher(tmp_path / "x.sqlite3", window=0)


async def test_close_ends_the_drainer_even_when_a_connect_swallows_its_cancellation(tmp_path: Path, monkeypatch) -> None:
    """Python 3.11's asyncio.wait_for, which aio_pika's connect uses, returns the outcome of a connection
    attempt that ends as it is cancelled: here a refusal, which the drainer took for the broker being down and
    retried. close() waited for the drainer without end (a test worker hung 300 s on it under load)."""
    connecting = asyncio.Event()

    async def connect_that_swallows_cancellation(*_args, **_kwargs):
        connecting.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise ConnectionRefusedError("refused just as the wait was cancelled") from None

    monkeypatch.setattr("shared.broker.aio_pika.connect", connect_that_swallows_cancellation)
    events = publisher(tmp_path / "chat.sqlite3")
    await events.start()
    events.submit(question(0))
    async with asyncio.timeout(5):
        await connecting.wait()
    closing = asyncio.ensure_future(events.close(timeout=0.2))
    done, _ = await asyncio.wait({closing}, timeout=10)  # not asyncio.timeout: cancelling close() would hang too
    assert done, "close() did not return"
    assert events.backlog == 1, "the event stays in the file for the next start"
