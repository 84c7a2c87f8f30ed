"""The event stream's throughput: events per second from publish (with publisher confirms) to committed row.

Measured: 10,000 events (5,000 requests, each a QuerySubmitted and a ResponseGenerated) handed to the
services' own publisher (`RabbitEventPublisher` with its SQLite outbox, as chat and the gateway run it),
published to RabbitMQ and consumed by a `python -m services.analytics` process into its SQLite store; the
time runs from the first `submit` to the moment the 10,000th row is in the analytics database (counted
by plain SQL every 10 ms).
Baseline, in the same repeat: the same bodies published by bare aio-pika with confirms, in windows of the
same size as the publisher's, onto the same topology (a durable quorum queue), and consumed by another
process that acks each message and stores nothing, with analytics' prefetch; the time runs from the first
publish to the 10,000th ack. The two go in alternating order from one repeat to the next.
The ratio says what fraction of the broker's own publish-to-consume rate survives the outbox, validation
and the database commit.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import secrets
import sqlite3
import statistics
import tempfile
import time
import uuid
from contextlib import closing
from pathlib import Path

import aio_pika

from bench.common import Figure
from bench.processes import ServiceProcess
from services.analytics.settings import Settings as AnalyticsSettings
from shared.broker import RabbitEventPublisher
from shared.events import (
    QuerySubmitted,
    QuerySubmittedData,
    ResponseGenerated,
    ResponseGeneratedData,
    parse_event,
    routing_key,
)
from shared.outbox import open_outbox
from shared.topology import dead_letter_names, declare_topology

EVENTS = 10_000
WINDOW = 100  # publisher confirms in flight, given to the publisher and to the raw loop alike
POLL_S = 0.01


def run(*, repeats: int, log=print) -> list[Figure]:
    settings = AnalyticsSettings()
    names = f"cairn.bench.{secrets.token_hex(4)}"
    service_names, raw_names = (f"{names}.events", f"{names}.analytics"), (f"{names}.raw", f"{names}.raw-queue")
    figure = Figure(
        name=f"events/s publish -> committed row ({EVENTS:,})", unit="ev/s", kind="ratio", target=None,
        baseline_name="raw aio-pika publish -> ack, no store",
    )
    drained: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="cairn-bench-events-") as scratch:
            for repeat in range(repeats):
                # A fresh analytics process and database each repeat, so every repeat starts from an empty table.
                analytics = ServiceProcess(
                    service="analytics", name=f"analytics-{repeat}", scratch=Path(scratch),
                    env={"CAIRN_DATA_DIR": str(Path(scratch) / f"analytics-{repeat}"), "ANALYTICS_DB_URL": "",
                         "EVENTS_EXCHANGE": service_names[0], "ANALYTICS_QUEUE": service_names[1]},
                )
                try:
                    analytics.start()
                    analytics.wait_ready(60)
                    service_bodies, raw_bodies = _bodies(), _bodies()
                    raw_first = repeat % 2 == 1
                    if raw_first:
                        raw = _raw_rate(settings.amqp_url, *raw_names, raw_bodies, prefetch=settings.prefetch)
                    rate, drained_s = asyncio.run(_service_rate(
                        settings.amqp_url, *service_names, service_bodies,
                        database=Path(scratch) / f"analytics-{repeat}" / "analytics.db",
                        outbox=Path(scratch) / f"outbox-{repeat}.sqlite3",
                    ))
                    if not raw_first:
                        raw = _raw_rate(settings.amqp_url, *raw_names, raw_bodies, prefetch=settings.prefetch)
                finally:
                    analytics.stop()
                figure.add(rate, raw)
                drained.append(drained_s)
                log(f"events: repeat {repeat + 1}/{repeats}: {rate:.0f} ev/s to committed rows "
                    f"(outbox drained after {drained_s:.1f}s), raw {raw:.0f} ev/s")
    finally:
        asyncio.run(_delete(settings.amqp_url, service_names, raw_names))
    figure.note = (
        f"the publisher's outbox was empty (all confirmed) after {statistics.median(drained):.1f}s "
        f"(median) of the {EVENTS / statistics.median(figure.values):.1f}s to the last row; window {WINDOW}, "
        f"prefetch {settings.prefetch}, SQLite store, an empty table each repeat"
    )
    return [figure]


def _bodies() -> list[tuple[str, bytes]]:
    """5,000 requests' QuerySubmitted + ResponseGenerated, as (routing key, JSON body), fresh event ids."""
    out = []
    for i in range(EVENTS // 2):
        request_id = uuid.uuid4().hex
        query = f"How does the retention policy treat archived record {i}?"
        response = ResponseGeneratedData(
            query=query, answered=True, model="offline", citation_count=2, cited_doc_ids=["policy", "archive"],
            timings_ms={"retrieval": 12.0, "generation": 8.0, "total": 24.0},
        )
        for event in (
            QuerySubmitted(source_service="chat", request_id=request_id, user_id="bench",
                           data=QuerySubmittedData(query=query, model="offline")),
            ResponseGenerated(source_service="chat", request_id=request_id, user_id="bench", data=response),
        ):
            out.append((routing_key(event), event.model_dump_json().encode()))
    return out


def _rows(database: Path) -> int:
    if not database.is_file():
        return 0
    with closing(sqlite3.connect(database, timeout=10)) as db:
        return db.execute("SELECT count(*) FROM events").fetchone()[0]


async def _service_rate(
    amqp_url: str, exchange: str, queue: str, bodies: list[tuple[str, bytes]], *, database: Path, outbox: Path
) -> tuple[float, float]:
    """(events/s from the first submit to the last row committed, seconds until the outbox was empty)."""
    events = [parse_event(body) for _, body in bodies]
    publisher = RabbitEventPublisher(
        amqp_url=amqp_url, exchange=exchange, queue=queue, window=WINDOW,
        outbox=open_outbox(path=outbox, max_events=2 * EVENTS, service="bench"),
    )
    await publisher.start()
    target = await asyncio.to_thread(_rows, database) + EVENTS
    published_at = None
    started = time.monotonic()
    for i, event in enumerate(events):
        publisher.submit(event)
        if i % WINDOW == 0:
            await asyncio.sleep(0)  # as under a burst of requests: the publisher drains while events arrive
    while await asyncio.to_thread(_rows, database) < target:
        if published_at is None and publisher.backlog == 0:
            published_at = time.monotonic()
        await asyncio.sleep(POLL_S)
    ended = time.monotonic()
    await publisher.close(timeout=10)
    return EVENTS / (ended - started), (published_at or ended) - started


def _raw_rate(amqp_url: str, exchange: str, queue: str, bodies: list[tuple[str, bytes]], *, prefetch: int) -> float:
    """Events/s from the first publish to the last ack, the consumer in a process of its own."""
    context = multiprocessing.get_context("spawn")
    ready, done = context.Event(), context.Queue()
    consumer = context.Process(
        target=_raw_consumer, args=(amqp_url, exchange, queue, len(bodies), prefetch, ready, done)
    )
    consumer.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the raw consumer did not subscribe within 60 s")
        started = asyncio.run(_raw_publish(amqp_url, exchange, queue, bodies))
        finished = done.get(timeout=300)
    finally:
        consumer.join(timeout=30)
        if consumer.is_alive():
            consumer.kill()
    return len(bodies) / (finished - started)


async def _raw_publish(amqp_url: str, exchange: str, queue: str, bodies: list[tuple[str, bytes]]) -> float:
    """Publish as the publisher does (persistent, confirms, `WINDOW` in flight); returns the start time."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        target = await declare_topology(channel, exchange=exchange, queue=queue)
        started = time.monotonic()
        for start in range(0, len(bodies), WINDOW):
            await asyncio.gather(*(
                target.publish(_persistent(body), routing_key=key, timeout=10)
                for key, body in bodies[start:start + WINDOW]
            ))
        return started


def _persistent(body: bytes) -> aio_pika.Message:
    return aio_pika.Message(body=body, content_type="application/json", delivery_mode=aio_pika.DeliveryMode.PERSISTENT)


def _raw_consumer(amqp_url: str, exchange: str, queue: str, count: int, prefetch: int, ready, done) -> None:
    async def consume() -> float:
        async with await aio_pika.connect(amqp_url) as connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=prefetch)
            await declare_topology(channel, exchange=exchange, queue=queue)
            source = await channel.get_queue(queue)
            acked, finished = 0, asyncio.get_running_loop().create_future()

            async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                nonlocal acked
                await message.ack()
                acked += 1
                if acked == count:
                    finished.set_result(time.monotonic())

            await source.consume(on_message)
            ready.set()
            return await finished

    done.put(asyncio.run(consume()))


async def _delete(amqp_url: str, *pairs: tuple[str, str]) -> None:
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        for exchange, queue in pairs:
            for name in (queue, dead_letter_names(queue)[1]):
                await channel.queue_delete(name)
            for name in (exchange, dead_letter_names(queue)[0]):
                await channel.exchange_delete(name)
