"""The outbox publisher against the real RabbitMQ: order, confirms, a publisher process killed with
SIGKILL whose outbox file a new publisher delivers, and the outbox size at chat's and the gateway's /metrics."""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
import httpx
import pytest
from prometheus_client import REGISTRY

from services.chat.main import create_app as create_chat
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway
from services.gateway.settings import Settings as GatewaySettings
from shared.broker import RabbitEventPublisher
from shared.events import QuerySubmitted, QuerySubmittedData, parse_event
from shared.outbox import Outbox, open_outbox
from shared.outbox_stores import PendingEvent, SqliteEventStore
from shared.topology import declare_topology
from tests.integration.chat.stand_ins import HEADERS, TOKEN, fake_retrieval_app
from tests.outbox_doubles import FullDisk
from tests.rabbit_node import RabbitNode
from tests.support import free_port, read_events, serve_in_thread

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

# A publisher in a process of its own: puts COUNT events in its outbox file, prints their ids, says
# "submitted", then drains the file with a small window (slow enough to be killed half-way).
CHILD = """
import asyncio, sys
from pathlib import Path
from shared.broker import RabbitEventPublisher
from shared.events import QuerySubmitted, QuerySubmittedData
from shared.outbox import open_outbox

path, amqp_url, unique, count = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])

async def main():
    outbox = open_outbox(path=path, max_events=100_000, service="child")
    events = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics", outbox=outbox, window=10
    )
    for n in range(count):
        event = QuerySubmitted(source_service="child", request_id=f"r{n}", data=QuerySubmittedData(query=f"q{n}"))
        events.submit(event)
        print(event.event_id)
    print("submitted", flush=True)
    await events.start()
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def question(n: int) -> QuerySubmitted:
    return QuerySubmitted(source_service="test", request_id=f"r{n}", data=QuerySubmittedData(query=f"q{n}"))


@pytest.fixture
async def topology(amqp_url: str, unique: str) -> AsyncIterator[tuple[str, str]]:
    """The test's exchange and queue, declared as publisher and consumer do, deleted afterwards."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        await declare_topology(await connection.channel(), exchange=f"{unique}.events", queue=f"{unique}.analytics")
    yield f"{unique}.events", f"{unique}.analytics"
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.queue_delete(f"{unique}.analytics")
        await channel.queue_delete(f"{unique}.analytics.dead")
        await channel.exchange_delete(f"{unique}.events")
        await channel.exchange_delete(f"{unique}.analytics.dlx")


async def queued(amqp_url: str, queue: str) -> int:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        declared = await (await connection.channel()).declare_queue(queue, passive=True)
        return declared.declaration_result.message_count


async def take_all(amqp_url: str, queue: str) -> list[str]:
    """Every message in the queue (acked), as event ids in queue order. Call it once the publisher is
    closed: every event it sent was confirmed, so it is in the queue."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=500)
        source = await channel.declare_queue(queue, passive=True)
        ids: list[str] = []
        async with source.iterator() as messages:
            async for message in messages:
                async with message.process():
                    assert message.message_id == str(parse_event(message.body).event_id)
                    ids.append(message.message_id)
                if len(ids) == source.declaration_result.message_count:
                    return ids
        return ids


@contextmanager
def publisher_process(path: Path, amqp_url: str, unique: str, count: int) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """The child publisher once it has submitted its events, with their ids; killed on the way out."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), amqp_url, unique, str(count)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        ids = []
        for line in child.stdout:
            if line.strip() == "submitted":
                break
            ids.append(line.strip())
        assert len(ids) == count, f"the publisher process exited with {child.wait()} before submitting"
        yield child, ids
    finally:
        kill(child)


def kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()  # SIGKILL: no close(), no drain
    child.wait(timeout=10)


async def test_events_are_published_in_order_persistent_and_confirmed(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    exchange, queue = topology
    outbox = open_outbox(path=tmp_path / "outbox.sqlite3", max_events=10_000, service="it-order")
    events = RabbitEventPublisher(amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=outbox)
    sent = [question(n) for n in range(300)]
    for event in sent:
        events.submit(event)
    await events.start()
    await events.close(timeout=20)
    assert (events.published, events.backlog) == (300, 0)  # all confirmed, the file emptied

    received = await read_events(amqp_url, unique, 300)
    assert [event.event_id for _, event in received] == [e.event_id for e in sent]
    assert all(m.delivery_mode == aio_pika.DeliveryMode.PERSISTENT for m, _ in received)
    assert [m.message_id for m, _ in received] == [str(e.event_id) for e in sent]
    assert len(open_outbox(path=tmp_path / "outbox.sqlite3", max_events=10, service="it-order")) == 0


async def test_events_wait_in_the_file_while_the_broker_is_unreachable_then_go(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"
    down = RabbitEventPublisher(
        amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/", exchange=exchange, queue=queue,
        outbox=open_outbox(path=path, max_events=100, service="it-down"),
    )
    await down.start()
    sent = [question(n) for n in range(5)]
    for event in sent:
        down.submit(event)
    await asyncio.sleep(1.0)  # a few failed attempts
    await down.close(timeout=0.5)
    assert down.published == 0

    up = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=open_outbox(path=path, max_events=100, service="it-down")
    )
    await up.start()
    await up.close(timeout=20)
    assert up.published == 5
    received = await read_events(amqp_url, unique, 5)
    assert [event.request_id for _, event in received] == [e.request_id for e in sent]


class FlakyFile(SqliteEventStore):
    """A real outbox file whose first read fails, as on a transient I/O error."""

    failures = 1

    def oldest(self, limit: int, after: int = 0) -> list[PendingEvent]:
        if self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        return super().oldest(limit, after)


async def test_a_failed_read_of_the_outbox_is_retried(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    exchange, queue = topology
    outbox = Outbox(durable=FlakyFile(tmp_path / "outbox.sqlite3"), max_events=100, service="it-flaky")
    events = RabbitEventPublisher(amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=outbox)
    events.submit(question(1))
    await events.start()
    await events.close(timeout=10)
    assert (events.published, events.backlog) == (1, 0)
    assert [event.request_id for _, event in await read_events(amqp_url, unique, 1)] == ["r1"]


async def test_events_behind_a_file_that_cannot_delete_still_go_out_once(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    """Sent events the full file cannot delete are not sent again and again: the drain moves past them."""
    exchange, queue = topology
    disk = FullDisk(tmp_path / "outbox.sqlite3")
    events = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, window=2,
        outbox=Outbox(durable=disk, max_events=100, service="it-full"),
    )
    sent = [question(n) for n in range(4)]
    for event in sent[:3]:
        events.submit(event)
    disk.full = True
    events.submit(sent[3])  # held in memory, behind the file's three
    await events.start()
    await events.close(timeout=10)
    assert (events.published, events.backlog) == (4, 0)
    assert await take_all(amqp_url, queue) == [str(e.event_id) for e in sent]  # in order, once each


async def published(events: RabbitEventPublisher, count: int, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while events.published < count:
        assert time.monotonic() < deadline, f"{events.published} of {count} events confirmed after {within_s} s"
        await asyncio.sleep(0.02)


async def test_events_go_in_batches_after_the_linger_or_when_a_window_is_full(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    exchange, queue = topology

    def publisher(name: str, *, linger_s: float) -> RabbitEventPublisher:
        outbox = open_outbox(path=tmp_path / f"{name}.sqlite3", max_events=100, service=f"it-{name}")
        return RabbitEventPublisher(amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=outbox, window=3, linger_s=linger_s)

    lingering = publisher("lingering", linger_s=0.6)
    await lingering.start()
    lingering.submit(question(1))
    await asyncio.sleep(0.3)
    lingering.submit(question(2))  # joins the batch the first one started
    await asyncio.sleep(0.1)
    assert (lingering.published, lingering.backlog) == (0, 2)  # kept in the file, not sent yet
    await published(lingering, 2, within_s=5)  # both, once the first one's linger passed
    await lingering.close(timeout=10)

    windowed = publisher("windowed", linger_s=60)
    await windowed.start()
    for n in (3, 4, 5):
        windowed.submit(question(n))
    await published(windowed, 3)  # a full window goes without waiting out the linger
    windowed.submit(question(6))
    await asyncio.sleep(0.3)
    assert (windowed.published, windowed.backlog) == (3, 1)
    await windowed.close(timeout=10)  # closing sends what lingers at once
    assert (windowed.published, windowed.backlog) == (4, 0)
    assert [event.request_id for _, event in await read_events(amqp_url, unique, 6)] == [f"r{n}" for n in range(1, 7)]


async def test_a_killed_publisher_s_file_is_delivered_by_the_next_exactly_once(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    """Killed while the broker cannot be reached: nothing was sent, so each event arrives exactly once."""
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"
    with publisher_process(path, f"amqp://guest:guest@127.0.0.1:{free_port()}/", unique, 500) as (child, submitted):
        kill(child)

    successor = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=open_outbox(path=path, max_events=10_000, service="it")
    )
    assert successor.backlog == 500
    await successor.start()
    await successor.close(timeout=30)
    assert successor.backlog == 0

    delivered = await take_all(amqp_url, queue)
    assert delivered == submitted  # all of them, once each, in order


async def test_a_publisher_killed_while_draining_loses_nothing(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    """Killed half-way through: the next publisher sends what is left. Only the window in flight at the
    kill (confirmed, not yet deleted) may be sent twice; the consumer is idempotent on event_id."""
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"
    with publisher_process(path, amqp_url, unique, 5000) as (child, submitted):
        deadline = time.monotonic() + 30
        while await queued(amqp_url, queue) < 500:
            assert time.monotonic() < deadline and child.poll() is None, "the publisher process sent nothing"
            await asyncio.sleep(0.02)
        kill(child)

    successor = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=open_outbox(path=path, max_events=10_000, service="it")
    )
    left = successor.backlog
    assert 0 < left < 5000, left  # killed with events still in its file
    await successor.start()
    await successor.close(timeout=30)
    assert successor.backlog == 0

    delivered = await take_all(amqp_url, queue)
    counts = Counter(delivered)
    assert set(counts) == set(submitted)  # none missing, none foreign
    repeated = [event_id for event_id, n in counts.items() if n > 1]
    print(f"killed with {left} of 5000 left in the file; {len(repeated)} delivered twice")
    assert max(counts.values()) <= 2
    assert len(repeated) <= 10  # at most the child's window in flight when it died


async def test_two_publishers_sharing_one_file_lose_nothing_and_say_so(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str], caplog
) -> None:
    """Forbidden but possible (two replicas given one OUTBOX_PATH): one publisher sends and deletes the
    other's events too. Each keeps working, so every event arrives (some perhaps twice), and it is logged."""
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"

    def publisher(name: str) -> RabbitEventPublisher:
        outbox = open_outbox(path=path, max_events=100, service=f"it-{name}")
        return RabbitEventPublisher(amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=outbox, linger_s=0)

    first, second = publisher("first"), publisher("second")
    sent = [question(n) for n in range(6)]
    for event in sent[:3]:
        first.submit(event)
    second.submit(sent[3])
    await second.start()  # sends (and deletes) the first's three events with its own
    await published(second, 4)
    await first.start()
    second.submit(sent[4])
    first.submit(sent[5])
    await published(second, 5)
    await published(first, 1)
    await first.close(timeout=10)
    await second.close(timeout=10)

    assert (first.backlog, second.backlog) == (0, 0)
    assert set(await take_all(amqp_url, queue)) == {str(e.event_id) for e in sent}
    assert "changed by another process" in caplog.text


def test_chat_and_the_gateway_report_their_outbox_at_metrics(tmp_path: Path, redis_url: str, unique: str) -> None:
    """With the broker unreachable, a question leaves its two events in chat's file, and /metrics says so."""
    nowhere = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    retrieval, _ = fake_retrieval_app()
    with serve_in_thread(retrieval) as retrieval_url:
        chat_settings = ChatSettings(
            service_token=TOKEN, retrieval_url=retrieval_url, amqp_url=nowhere, data_dir=tmp_path, redis_prefix=unique
        )
        with serve_in_thread(create_chat(chat_settings)) as chat_url:
            answered = httpx.post(f"{chat_url}/chat", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)
            assert answered.status_code == 200, answered.text
            metrics = httpx.get(f"{chat_url}/metrics", timeout=5).text
    assert 'cairn_outbox_events{service="chat"} 2.0' in metrics
    assert len(open_outbox(path=tmp_path / "outbox" / "chat.sqlite3", max_events=10, service="it-metrics")) == 2

    gateway_settings = GatewaySettings(redis_url=redis_url, redis_prefix=unique, amqp_url=nowhere, data_dir=tmp_path)
    with serve_in_thread(create_gateway(gateway_settings)) as gateway_url:
        metrics = httpx.get(f"{gateway_url}/metrics", timeout=5).text
    assert 'cairn_outbox_events{service="gateway"} 0.0' in metrics
    assert (tmp_path / "outbox" / "gateway.sqlite3").is_file()


async def test_an_event_whose_occurred_at_the_consumer_would_refuse_is_refused_at_submit_not_retried_forever(
    amqp_url: str, unique: str, topology: tuple[str, str], caplog
) -> None:
    """An occurred_at before 1970 cannot even be sent (AMQP's timestamp is unsigned): it stayed at the head of
    the outbox, failing every window. One the consumer would dead-letter (before 2000, days ahead) is not
    worth a trip to the broker either."""
    exchange, queue = topology
    events = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue,
        outbox=Outbox(durable=None, max_events=100, service="it-clock"),
    )
    good = [question(1), question(2)]
    wrong_clocks = (datetime(1969, 12, 31, tzinfo=UTC), datetime(1999, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC))
    bad = [question(3 + n).model_copy(update={"occurred_at": at}) for n, at in enumerate(wrong_clocks)]
    caplog.set_level(logging.ERROR, logger="shared.broker")
    events.submit(good[0])
    for event in bad:
        events.submit(event)
    events.submit(good[1])
    await events.start()
    await events.close(timeout=5)
    assert (events.published, events.backlog) == (2, 0)
    assert await take_all(amqp_url, queue) == [str(e.event_id) for e in good]
    assert REGISTRY.get_sample_value(
        "cairn_events_dropped_total", {"service": "it-clock", "reason": "invalid_occurred_at"}
    ) == 3
    assert "occurred_at out of range" in caplog.text


def _publisher_over_a_file_holding(
    event, *, path: Path, exchange: str, topology: tuple[str, str], amqp_url: str, service: str,
    occurred_at: str | None = None,
) -> RabbitEventPublisher:
    """A publisher whose outbox file already holds `event`, as written for `exchange` by an earlier run."""
    store = SqliteEventStore(path)
    store.put(PendingEvent(
        event_id=str(event.event_id), event_type=event.event_type,
        occurred_at=occurred_at or event.occurred_at.isoformat(), exchange=exchange,
        routing_key="analytics.query.submitted", body=event.model_dump_json().encode(),
    ))
    store.close()
    return RabbitEventPublisher(
        amqp_url=amqp_url, exchange=topology[0], queue=topology[1],
        outbox=open_outbox(path=path, max_events=100, service=service),
    )


async def test_events_returned_because_an_operator_deleted_the_queue_are_kept_and_delivered(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    """The publisher declares the queue when it connects. Deleted while the connection stays up, the queue is
    gone for every later publish: RabbitMQ confirms the message and returns it unroutable, so a confirm alone
    does not mean the event is stored anywhere. Returned events stay in the outbox until the queue is back."""
    exchange, queue = topology
    events = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, linger_s=0,
        outbox=open_outbox(path=tmp_path / "outbox.sqlite3", max_events=100, service="it-returned"),
    )
    await events.start()
    sent = [question(n) for n in range(3)]
    events.submit(sent[0])
    await published(events, 1)
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        await (await connection.channel()).queue_delete(queue)  # the operator's mistake
    for event in sent[1:]:
        events.submit(event)
    await published(events, 3)
    await events.close(timeout=10)
    assert events.backlog == 0
    assert await take_all(amqp_url, queue) == [str(e.event_id) for e in sent[1:]]  # the first went with the queue


async def test_an_event_no_queue_will_ever_take_is_dropped_counted_and_does_not_hold_up_the_others(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str], caplog
) -> None:
    """An event of the file addressed to an exchange of an earlier configuration, to which nothing is bound:
    the publisher declares no queue for it, so every publish comes back unroutable. It is dropped with an
    error and counted, rather than retried forever or forgotten silently."""
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"
    events = _publisher_over_a_file_holding(
        question(0), path=path, exchange=f"{unique}.retired", topology=(exchange, queue), amqp_url=amqp_url,
        service="it-unroutable",
    )
    caplog.set_level(logging.ERROR, logger="shared.broker")
    sent = [question(n) for n in range(1, 4)]
    for event in sent:
        events.submit(event)
    await events.start()
    try:
        await events.close(timeout=10)
        assert events.backlog == 0
        assert await take_all(amqp_url, queue) == [str(e.event_id) for e in sent]
        assert REGISTRY.get_sample_value(
            "cairn_events_dropped_total", {"service": "it-unroutable", "reason": "unroutable"}
        ) == 1
        assert "event unroutable, dropped" in caplog.text
    finally:
        connection = await aio_pika.connect(amqp_url)
        async with connection:
            await (await connection.channel()).exchange_delete(f"{unique}.retired")


async def test_an_event_of_the_file_that_cannot_be_made_a_message_is_dropped_and_the_rest_go(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str], caplog
) -> None:
    """A damaged row (here an occurred_at that is no date) cannot become an AMQP message. It killed the task
    that drains the outbox, without a word: every later event waited forever. It is dropped and counted."""
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"
    events = _publisher_over_a_file_holding(
        question(0), path=path, exchange=exchange, topology=(exchange, queue), amqp_url=amqp_url,
        service="it-damaged", occurred_at="yesterday",
    )
    caplog.set_level(logging.ERROR, logger="shared.broker")
    sent = [question(n) for n in range(1, 4)]
    for event in sent:
        events.submit(event)
    await events.start()
    await events.close(timeout=10)
    assert (events.published, events.backlog) == (3, 0)
    assert await take_all(amqp_url, queue) == [str(e.event_id) for e in sent]
    assert REGISTRY.get_sample_value("cairn_events_dropped_total", {"service": "it-damaged", "reason": "error"}) == 1
    assert "event cannot be sent, dropped" in caplog.text


async def test_events_held_in_memory_while_the_disk_was_full_reach_the_file_once_it_frees(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str]
) -> None:
    """A disk full for a moment while the broker is down: the events of that moment, and every one after it,
    were kept in memory until the broker came back, and lost when the process stopped first. They go to the
    file as soon as it takes writes again, and the next process delivers all of them, in order."""
    exchange, queue = topology
    path = tmp_path / "outbox.sqlite3"
    disk = FullDisk(path)
    down = RabbitEventPublisher(
        amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/", exchange=exchange, queue=queue, linger_s=0,
        outbox=Outbox(durable=disk, max_events=100, service="it-freed"),
    )
    await down.start()
    sent = [question(n) for n in range(4)]
    down.submit(sent[0])
    disk.full = True
    down.submit(sent[1])
    disk.full = False
    down.submit(sent[2])
    await asyncio.sleep(1.0)  # failed attempts to reach the broker
    down.submit(sent[3])
    await down.close(timeout=0.5)
    lost = REGISTRY.get_sample_value("cairn_events_dropped_total", {"service": "it-freed", "reason": "shutdown"})
    assert lost is None

    up = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=open_outbox(path=path, max_events=100, service="it")
    )
    assert up.backlog == 4
    await up.start()
    await up.close(timeout=10)
    assert await take_all(amqp_url, queue) == [str(e.event_id) for e in sent]


async def test_events_of_a_process_whose_outbox_file_could_not_be_opened_reach_the_file_once_it_can(
    tmp_path: Path, amqp_url: str, unique: str, topology: tuple[str, str], monkeypatch
) -> None:
    """The outbox directory blocked at start, the broker down: the events wait in memory, and go to the file
    while the process runs once the directory can be made, so a process killed then loses none of them."""
    monkeypatch.setattr("shared.outbox.REOPEN_EVERY_S", 0.3)
    exchange, queue = topology
    blocker = tmp_path / "outbox"
    blocker.write_text("a file where the outbox directory should be")
    path = blocker / "gateway.sqlite3"
    down = RabbitEventPublisher(
        amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/", exchange=exchange, queue=queue, linger_s=0,
        outbox=open_outbox(path=path, max_events=100, service="it-opened-late"),
    )
    await down.start()
    sent = [question(n) for n in range(3)]
    for event in sent:
        down.submit(event)
    blocker.unlink()
    await asyncio.sleep(1.5)  # failed attempts to reach the broker, each a chance to open the file
    assert path.exists()
    assert len(SqliteEventStore(path)) == 3  # in the file before any shutdown: a kill would lose nothing
    await down.close(timeout=0.5)

    up = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, outbox=open_outbox(path=path, max_events=100, service="it")
    )
    await up.start()
    await up.close(timeout=10)
    assert await take_all(amqp_url, queue) == [str(e.event_id) for e in sent]


async def test_an_event_the_broker_refuses_is_dropped_with_the_reason_and_the_others_still_go(
    tmp_path: Path, unique: str, caplog
) -> None:
    """A message over the broker's max_message_size closes the channel, failing every publish of its window.
    Sent again and again, it held up every later event for good. The publisher sends the window's events
    one at a time to find the one the broker refuses, drops that one with the broker's reason, and goes on."""
    node = RabbitNode(config="max_message_size = 2048\n")  # its own node: the limit is the whole broker's
    node.start()
    try:
        exchange, queue = f"{unique}.events", f"{unique}.analytics"
        events = RabbitEventPublisher(
            amqp_url=node.url, exchange=exchange, queue=queue, linger_s=60,
            outbox=open_outbox(path=tmp_path / "outbox.sqlite3", max_events=100, service="it-refused"),
        )
        caplog.set_level(logging.ERROR, logger="shared.broker")
        huge = question(0).model_copy(update={"data": QuerySubmittedData(query="q" * 4000)})
        sent = [question(1), huge, question(2), question(3)]
        for event in sent:
            events.submit(event)
        await events.start()
        await events.close(timeout=10)
        assert events.backlog == 0
        # A message of the window the broker stored before it closed the channel, but whose confirm was lost
        # with the channel, goes again: a repeat the consumer absorbs.
        assert set(await take_all(node.url, queue)) == {str(e.event_id) for e in sent if e is not huge}
        assert REGISTRY.get_sample_value(
            "cairn_events_dropped_total", {"service": "it-refused", "reason": "refused"}
        ) == 1
        [refused] = [r for r in caplog.records if r.getMessage() == "event refused by the broker, dropped"]
        assert refused.event_id == str(huge.event_id) and "larger than configured max size" in refused.error
    finally:
        node.cleanup()
