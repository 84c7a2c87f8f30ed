"""The analytics consumer on the real RabbitMQ: events end up as rows once each, whatever is redelivered,
however many replicas consume, and however the consumer is stopped; what cannot be stored is dead-lettered
with the reason."""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import aio_pika
import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from services.analytics.adapters.consumer import DeadLetterPublisher, EventConsumer
from services.analytics.handler import Outcome
from services.analytics.main import create_app
from services.analytics.settings import Settings
from shared.broker import RabbitEventPublisher
from shared.topology import DELIVERY_LIMIT, dead_letter_names, declare_topology
from tests.integration.analytics.event_stream import (
    as_message,
    dead_lettered,
    delete_topology,
    publish_raw,
    queue_depth,
    stored_events,
)
from tests.integration.analytics.pg_databases import database_of_its_own_role, fresh_database
from tests.integration.analytics.tcp_proxy import TcpProxy
from tests.unit.analytics.analytics_events import responded, submitted
from tests.unit.analytics.analytics_fakes import FakeEventStore

pytestmark = pytest.mark.integration

TOKEN = "integration-test-service-token"
AUTH = {"X-Service-Token": TOKEN}


@pytest.fixture
async def names(amqp_url: str, unique: str) -> AsyncIterator[dict[str, str]]:
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    yield names
    await delete_topology(amqp_url, **names)


def settings_for(tmp_path: Path, amqp_url: str, names: dict[str, str], **more) -> Settings:
    return Settings(
        service_token=TOKEN, data_dir=tmp_path, amqp_url=amqp_url,
        events_exchange=names["exchange"], analytics_queue=names["queue"], **more,
    )


async def eventually(check: Callable[[], bool | Awaitable[bool]], *, timeout: float = 10.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if await result if inspect.isawaitable(result) else result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def rows_are(database_url: str, count: int) -> Callable[[], bool]:
    return lambda: len(stored_events(database_url)) == count


@pytest.fixture
async def settings(tmp_path: Path, amqp_url: str, names: dict[str, str]) -> Settings:
    return settings_for(tmp_path, amqp_url, names)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:

            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await eventually(ready, what="analytics to be ready")
            yield client


async def publish(amqp_url: str, names: dict[str, str], *events) -> None:
    """Through the services' publisher (its outbox in memory here)."""
    publisher = RabbitEventPublisher(amqp_url=amqp_url, exchange=names["exchange"], queue=names["queue"])
    await publisher.start()
    for event in events:
        publisher.submit(event)
    await publisher.close(timeout=10)
    assert publisher.published == len(events)


async def test_published_events_are_stored(client, settings: Settings, amqp_url: str, names: dict) -> None:
    first, second = submitted(request_id="x1"), responded(request_id="x1", total_ms=250.0, citations=3)
    await publish(amqp_url, names, first, second)
    await eventually(rows_are(settings.database_url, 2), what="both events stored")
    assert sorted(stored_events(settings.database_url)) == sorted(
        [(str(first.event_id), "QuerySubmitted"), (str(second.event_id), "ResponseGenerated")]
    )


async def test_the_same_event_twice_is_stored_once(client, settings: Settings, amqp_url: str, names: dict) -> None:
    twice, marker = submitted(request_id="dup"), submitted(request_id="marker")
    await publish_raw(amqp_url, **names, messages=[as_message(twice), as_message(twice), as_message(marker)])
    # One consumer takes the queue in order, so once the marker is stored the duplicate has been handled.
    await eventually(rows_are(settings.database_url, 2), what="the marker event")
    await asyncio.sleep(0.2)
    stored = sorted(event_id for event_id, _ in stored_events(settings.database_url))
    assert stored == sorted([str(twice.event_id), str(marker.event_id)])


async def test_a_store_error_on_every_delivery_is_dead_lettered_by_the_consumer_with_the_error(
    amqp_url: str, names: dict
) -> None:
    store = FakeEventStore()
    store.broken = RuntimeError("disk full")
    event = submitted(request_id="unstorable")
    consumer = EventConsumer(amqp_url=amqp_url, store=store, **names)
    await consumer.start()
    try:
        await publish_raw(amqp_url, **names, messages=[as_message(event)])
        [dead] = await dead_lettered(amqp_url, names["queue"], 1)
    finally:
        await consumer.close()
    assert store.add_calls == DELIVERY_LIMIT + 1  # the broker's redeliveries, then our dead letter
    assert dead.headers["x-cairn-dead-reason"] == (
        f"store error: RuntimeError('disk full') (last of {DELIVERY_LIMIT + 1} deliveries)"
    )
    assert "x-death" not in dead.headers  # the consumer got there before the broker's delivery limit
    assert (dead.message_id, dead.body) == (str(event.event_id), event.model_dump_json().encode())
    assert consumer.outcomes == {Outcome.REQUEUE: DELIVERY_LIMIT, Outcome.DEAD_LETTER: 1}


async def test_a_dead_letter_with_nowhere_to_go_raises_instead_of_vanishing(amqp_url: str, names: dict) -> None:
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        await declare_topology(channel, **names)
        await channel.queue_delete(dead_letter_names(names["queue"])[1])
        confirming = await connection.channel(publisher_confirms=True, on_return_raises=True)
        dlx = await confirming.get_exchange(dead_letter_names(names["queue"])[0])
        await channel.default_exchange.publish(aio_pika.Message(b"{not json"), routing_key=names["queue"])
        message = await (await channel.get_queue(names["queue"])).get(timeout=5)
        with pytest.raises(aio_pika.exceptions.PublishError):
            await DeadLetterPublisher(dlx, queue=names["queue"], consumer="test").send(message, reason="test")
        await message.nack(requeue=True)


@pytest.fixture
def fresh_postgres(postgres_server_url: str) -> Iterator[str]:
    """An empty PostgreSQL database for this test, dropped afterwards."""
    server = make_url(postgres_server_url)
    name = f"cairn_replicas_{uuid.uuid4().hex[:10]}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield server.set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_two_replicas_store_each_event_once(
    tmp_path: Path, amqp_url: str, names: dict, fresh_postgres: str
) -> None:
    events = [submitted(request_id=f"replica-{i}") for i in range(500)]
    # Each event twice, side by side, so the two copies usually reach different replicas at the same time.
    messages = [as_message(e) for e in events for _ in range(2)]
    apps = [
        create_app(settings_for(tmp_path / f"replica-{i}", amqp_url, names, db_url=fresh_postgres)) for i in range(2)
    ]
    async with apps[0].router.lifespan_context(apps[0]), apps[1].router.lifespan_context(apps[1]):
        consumers = [app.state.consumer for app in apps]

        await eventually(lambda: all(c.connected for c in consumers), what="both replicas to subscribe")
        await publish_raw(amqp_url, **names, messages=messages)

        acked = lambda: sum(c.outcomes[Outcome.ACK] for c in consumers) == len(messages)  # noqa: E731
        await eventually(acked, timeout=60, what="every message acked")
        rows = stored_events(fresh_postgres)
        assert sorted(i for i, _ in rows) == sorted(str(e.event_id) for e in events)
        assert all(c.outcomes[Outcome.ACK] > 0 for c in consumers), [c.outcomes for c in consumers]
        assert not any(c.outcomes[Outcome.DEAD_LETTER] for c in consumers)
    assert await queue_depth(amqp_url, names["queue"]) == 0


def _set_read_only(database_url: str, server_url: str, *, refused: bool) -> None:
    """Make the database refuse writes (or take them again) while it still answers SELECT 1, as a hot
    standby or default_transaction_read_only does, and end its sessions so that the pool reconnects."""
    url = make_url(database_url)
    admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute(f'ALTER DATABASE "{url.database}" SET default_transaction_read_only = {"on" if refused else "off"}')
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (url.database,),
        )


def _revoke_insert(database_url: str, server_url: str, *, refused: bool) -> None:
    """Revoke (or grant again) the INSERT privilege of the role of `database_url` on the events table, as an
    administrator's mistake would: the database still takes connections, reads and its other writes."""
    url = make_url(database_url)
    admin = make_url(server_url).set(drivername="postgresql", database=url.database)
    change = "REVOKE INSERT ON events FROM" if refused else "GRANT INSERT ON events TO"
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'{change} "{url.username}"')


# How the database refuses writes, the database it does so with, and what its error says.
REFUSALS = {
    "read-only": (_set_read_only, fresh_database, "read-only transaction"),
    # As a role of its own: the superuser the tests connect as has every privilege.
    "insert-revoked": (_revoke_insert, database_of_its_own_role, "permission denied"),
}


@pytest.mark.parametrize("refusal", REFUSALS)
async def test_a_database_that_refuses_writes_makes_analytics_not_ready_and_loses_no_event(
    refusal: str, tmp_path: Path, amqp_url: str, names: dict, postgres_server_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read-only or full database still answers SELECT 1; a revoked privilege refuses every event alike.
    Either way the events are held, not dead-lettered, and readiness says why."""
    refuse, database, error = REFUSALS[refusal]
    with database(postgres_server_url) as database_url:
        app = create_app(settings_for(tmp_path, amqp_url, names, db_url=database_url))
        async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://analytics"
        ) as client:

            async def writes_refused() -> bool:
                response = await client.get("/readyz")
                return response.status_code == 503 and response.json()["checks"] == {
                    "database": True, "database_writes": False, "broker": True,
                    "retrieval": False, "retrieval_service_token": True,
                }

            async def writable_metric() -> str:
                lines = (await client.get("/metrics")).text.splitlines()
                return next(line for line in lines if line.startswith("cairn_analytics_database_writable "))

            await eventually(lambda: app.state.consumer.connected, what="the consumer to subscribe")
            refuse(database_url, postgres_server_url, refused=True)
            events = [submitted(request_id=f"{refusal}-{i}") for i in range(20)]
            await publish_raw(amqp_url, **names, messages=[as_message(e) for e in events], window=5, pause_s=0.1)

            await eventually(writes_refused, what="readiness to say that writes are refused")
            assert await writable_metric() == "cairn_analytics_database_writable 0.0"
            await asyncio.sleep(2)  # a few retries of the held batch, more deliveries than the dead-letter limit
            assert stored_events(database_url) == []
            assert not app.state.consumer.outcomes[Outcome.DEAD_LETTER]
            said = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("services.analytics")]
            assert [r.getMessage() for r in said] == [
                "database refuses writes, events stay in the queue until it takes them"
            ], "once, not per message or per retry"
            assert error in said[0].error

            refuse(database_url, postgres_server_url, refused=False)
            await eventually(rows_are(database_url, len(events)), timeout=40, what="the held events to be stored")
            await eventually(lambda: _ready(client), what="readiness to come back")
            assert await writable_metric() == "cairn_analytics_database_writable 1.0"
        assert await queue_depth(amqp_url, names["queue"]) == 0


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200


class GatedStore(FakeEventStore):
    """Holds each call that stores events until `gate` opens, so a test can act while a batch is being stored."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def add_many(self, records) -> list[bool]:
        self.entered.set()
        if not self.gate.wait(20):
            raise TimeoutError("the test never opened the gate")
        return super().add_many(records)


async def test_prefetched_messages_are_stored_in_batches_each_once(amqp_url: str, names: dict) -> None:
    events = [submitted(request_id=f"b{i}") for i in range(300)]
    await publish_raw(amqp_url, **names, messages=[as_message(e) for e in events])
    store = FakeEventStore()
    consumer = EventConsumer(amqp_url=amqp_url, store=store, prefetch=50, batch_size=40, batch_wait_ms=20, **names)
    await consumer.start()
    try:
        await eventually(lambda: consumer.outcomes[Outcome.ACK] == len(events), what="every message acked")
    finally:
        await consumer.close()
    assert sorted(store.rows) == sorted(str(e.event_id) for e in events)
    assert sum(store.batches) == len(events) and max(store.batches) == 40, store.batches
    assert len(store.batches) < len(events) / 4, store.batches
    assert await queue_depth(amqp_url, names["queue"]) == 0


async def test_a_full_batch_goes_at_once_without_waiting_out_the_batch_wait(amqp_url: str, names: dict) -> None:
    events = [submitted(request_id=f"f{i}") for i in range(3)]
    await publish_raw(amqp_url, **names, messages=[as_message(e) for e in events])
    store = FakeEventStore()
    consumer = EventConsumer(amqp_url=amqp_url, store=store, batch_size=3, batch_wait_ms=1000 * 60, **names)
    await consumer.start()
    try:
        await eventually(lambda: len(store.rows) == 3, what="the full batch", timeout=20)
    finally:
        await consumer.close()
    assert store.batches == [3]


async def test_close_finishes_the_batch_in_hand_and_returns_the_rest(amqp_url: str, names: dict) -> None:
    store, events = GatedStore(), [submitted(request_id=f"s{i}") for i in range(3)]
    await publish_raw(amqp_url, **names, messages=[as_message(e) for e in events])
    # A batch of two, and time enough for the second to join the first.
    consumer = EventConsumer(amqp_url=amqp_url, store=store, batch_size=2, batch_wait_ms=2000, **names)
    await consumer.start()
    assert await asyncio.to_thread(store.entered.wait, 10)
    closing = asyncio.create_task(consumer.close(timeout_s=10))
    await asyncio.sleep(0.3)
    assert not closing.done(), "close() returned while a batch was being stored"
    store.gate.set()
    await asyncio.wait_for(closing, 10)
    assert sorted(store.rows) == sorted(str(e.event_id) for e in events[:2])
    assert consumer.outcomes == {Outcome.ACK: 2}
    assert await queue_depth(amqp_url, names["queue"]) == 1  # the prefetched third went back

    after = EventConsumer(amqp_url=amqp_url, store=store, **names)
    await after.start()
    try:
        await eventually(lambda: len(store.rows) == 3, what="the third event")
    finally:
        await after.close()
    assert store.batches == [2, 1]  # the first two were acked, so nobody got them again


async def test_close_that_times_out_leaves_the_message_to_be_redelivered_and_stored_once(
    amqp_url: str, names: dict
) -> None:
    store, event = GatedStore(), submitted(request_id="slow")
    await publish_raw(amqp_url, **names, messages=[as_message(event)])
    consumer = EventConsumer(amqp_url=amqp_url, store=store, **names)
    await consumer.start()
    assert await asyncio.to_thread(store.entered.wait, 10)
    await asyncio.wait_for(consumer.close(timeout_s=0.5), 5)
    store.gate.set()  # the commit that was under way lands after all, but was never acked
    await eventually(lambda: len(store.rows) == 1, what="the late commit")

    after = EventConsumer(amqp_url=amqp_url, store=store, **names)
    await after.start()
    try:
        await eventually(lambda: after.outcomes[Outcome.ACK] == 1, what="the redelivery")
    finally:
        await after.close()
    assert (len(store.rows), store.add_calls) == (1, 2)  # redelivered, found stored, acked
    assert await queue_depth(amqp_url, names["queue"]) == 0


async def test_service_token_and_bad_range_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.get("/analytics/summary")
    assert (response.status_code, response.json()["error"]) == (401, "unauthorized")
    response = await client.get("/analytics/summary", params={"from": "not-a-date"}, headers=AUTH)
    assert (response.status_code, response.json()["error"]) == (422, "invalid_request")


async def test_starts_and_answers_without_the_broker_then_stops_promptly(tmp_path: Path, names: dict) -> None:
    app = create_app(settings_for(tmp_path, "amqp://guest:guest@127.0.0.1:1/", names))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        async with app.router.lifespan_context(app):
            await asyncio.sleep(0.3)  # a few connection attempts fail meanwhile
            ready = await client.get("/readyz")
            checks = ready.json()["checks"]
            assert (ready.status_code, checks["database"], checks["broker"]) == (503, True, False)
            assert (await client.get("/analytics/summary", headers=AUTH)).status_code == 200
            started_stopping = time.monotonic()
        assert time.monotonic() - started_stopping < 3


async def test_connects_when_the_broker_appears_and_reconnects_after_it_drops(
    tmp_path: Path, amqp_url: str, names: dict
) -> None:
    target = urlparse(amqp_url)
    proxy = TcpProxy(target_host=target.hostname or "127.0.0.1", target_port=target.port or 5672)
    await proxy.start()
    await proxy.stop()  # keep the port, broker "down"
    via_proxy = target._replace(netloc=f"{target.netloc.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}").geturl()
    settings = settings_for(tmp_path, via_proxy, names)
    app = create_app(settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:

        async def broker_ready() -> bool:
            return (await client.get("/readyz")).json()["checks"]["broker"]

        async with app.router.lifespan_context(app):
            await asyncio.sleep(0.5)
            assert not await broker_ready()
            await proxy.start()
            await eventually(broker_ready, timeout=20, what="the first connection")
            await publish(amqp_url, names, submitted(request_id="before-drop"))
            await eventually(rows_are(settings.database_url, 1), what="the event before the drop")

            await proxy.stop()
            await eventually(lambda: _not(broker_ready), what="the drop to be noticed")
            await publish(amqp_url, names, submitted(request_id="during-drop"))  # waits in the durable queue
            await proxy.start()
            await eventually(
                rows_are(settings.database_url, 2), timeout=30, what="the event published while disconnected"
            )
        await proxy.stop()


async def _not(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()
