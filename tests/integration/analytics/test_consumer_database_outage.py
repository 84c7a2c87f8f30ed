"""Events held while the database is down, on the real RabbitMQ: the quorum queue counts every return of a
message (a nack, or the consumer's connection closing with it unacked) and dead-letters it past DELIVERY_LIMIT,
so restarts of analytics and broker connections lost during a long outage must not spend that limit."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlparse

import aio_pika
import pytest
from aio_pika.exceptions import ChannelInvalidStateError
from aio_pika.robust_queue import RobustQueue

from services.analytics.adapters.consumer import EventConsumer, QueueRenewals
from services.analytics.handler import Outcome
from shared.topology import DELIVERY_LIMIT
from tests.integration.analytics.event_stream import (
    as_message,
    dead_lettered,
    delete_topology,
    publish_raw,
    queue_depth,
)
from tests.integration.analytics.tcp_proxy import TcpProxy
from tests.unit.analytics.analytics_events import submitted
from tests.unit.analytics.analytics_fakes import FakeEventStore

pytestmark = pytest.mark.integration

RETURNS = DELIVERY_LIMIT + 2  # more returns of each held message than the queue allows deliveries
BACK = "the held events to come back (not dead-lettered by the broker)"


@pytest.fixture
async def names(amqp_url: str, unique: str) -> AsyncIterator[dict[str, str]]:
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    yield names
    await delete_topology(amqp_url, **names)


async def eventually(check: Callable[[], bool], *, timeout: float = 15.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


async def stored_once_the_database_is_back(amqp_url: str, names: dict, store: FakeEventStore, events: list) -> None:
    store.down = False
    consumer = EventConsumer(amqp_url=amqp_url, store=store, **names)
    await consumer.start()
    try:
        await eventually(lambda: len(store.rows) == len(events), what="the held events to be stored")
    finally:
        await consumer.close()
    assert sorted(store.rows) == sorted(str(e.event_id) for e in events)
    assert await dead_lettered(amqp_url, names["queue"], 1, timeout=0.5) == []
    assert await queue_depth(amqp_url, names["queue"]) == 0


async def test_events_held_through_more_restarts_than_the_delivery_limit_are_stored_when_the_database_returns(
    amqp_url: str, names: dict
) -> None:
    store = FakeEventStore()
    store.down = True
    events = [submitted(request_id=f"held-{i}") for i in range(3)]
    await publish_raw(amqp_url, **names, messages=[as_message(e) for e in events])
    for _ in range(RETURNS):  # analytics restarted again and again while the database is down
        consumer = EventConsumer(amqp_url=amqp_url, store=store, **names)
        await consumer.start()
        calls = store.add_calls
        await eventually(lambda: store.add_calls > calls, what=BACK)
        await asyncio.sleep(0.2)  # time to be delivered again, as a copy, where one is sent
        await consumer.close()
        assert not consumer.outcomes[Outcome.ACK]
    await stored_once_the_database_is_back(amqp_url, names, store, events)


async def test_events_held_through_more_broker_drops_than_the_delivery_limit_are_stored_when_the_database_returns(
    amqp_url: str, names: dict
) -> None:
    target = urlparse(amqp_url)
    proxy = TcpProxy(target_host=target.hostname or "127.0.0.1", target_port=target.port or 5672)
    await proxy.start()
    via_proxy = target._replace(netloc=f"{target.netloc.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}")
    store = FakeEventStore()
    store.down = True
    events = [submitted(request_id=f"dropped-{i}") for i in range(3)]
    await publish_raw(amqp_url, **names, messages=[as_message(e) for e in events])
    consumer = EventConsumer(
        amqp_url=via_proxy._replace(query="reconnect_interval=0.2").geturl(), store=store, **names
    )
    await consumer.start()
    try:
        for _ in range(RETURNS):  # the connection to RabbitMQ lost again and again while the database is down
            calls = store.add_calls
            await eventually(lambda: consumer.connected and store.add_calls > calls, what=BACK)
            await asyncio.sleep(0.3)  # time to be delivered again, as a copy, where one is sent
            await proxy.stop()
            await eventually(lambda: not consumer.connected, what="the drop to be noticed")
            await proxy.start()
    finally:
        await consumer.close()
        await proxy.stop()
    await stored_once_the_database_is_back(amqp_url, names, store, events)


async def test_a_renewal_sent_while_its_channel_is_being_reopened_waits_for_it(amqp_url: str, names: dict) -> None:
    """After a reconnection the channel analytics consumes on may deliver before the renewals' channel is open
    again. A renewal sent then waits for it: failing at once, it left the message held until the next retry,
    and on a slow machine each further drop came first, spending a delivery each time until the broker
    dead-lettered the held events."""
    target = urlparse(amqp_url)
    proxy = TcpProxy(target_host=target.hostname or "127.0.0.1", target_port=target.port or 5672)
    await proxy.start()
    via_proxy = target._replace(netloc=f"{target.netloc.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}")
    event = submitted(request_id="renewed")
    await publish_raw(amqp_url, **names, messages=[as_message(event)])
    async with await aio_pika.connect(amqp_url) as direct:
        held = await (await (await direct.channel()).get_queue(names["queue"])).get(timeout=5)
        connection = await aio_pika.connect_robust(via_proxy._replace(query="reconnect_interval=0.2").geturl())
        try:
            confirming = await connection.channel(publisher_confirms=True, on_return_raises=True)
            renewals = QueueRenewals(confirming.default_exchange, queue=names["queue"])
            await proxy.stop()
            await eventually(lambda: confirming.is_closed, what="the drop to close the channel")
            await proxy.start()
            await renewals.send(held)  # the channel reopens 0.2 s from now
            await held.ack()
        finally:
            await connection.close()
            await proxy.stop()
        copy = await (await (await direct.channel()).get_queue(names["queue"])).get(timeout=5)
        await copy.ack()
    assert copy.body == held.body and copy.headers["x-cairn-routing-key"] == held.routing_key


async def test_a_broker_drop_between_subscribing_and_consuming_is_retried_not_the_end_of_consuming(
    amqp_url: str, names: dict, monkeypatch
) -> None:
    # The consume call sat outside the retry loop: had it failed, the consumer task ended for good, silently,
    # with the process up and its /readyz 503.
    real_consume = RobustQueue.consume
    failures = []

    async def consume_failing_once(queue, callback, *args, **kwargs):
        if not failures:
            failures.append(queue)
            raise ChannelInvalidStateError("the broker dropped the channel")
        return await real_consume(queue, callback, *args, **kwargs)

    events = [submitted(request_id=f"drop-{i}") for i in range(3)]
    store = FakeEventStore()
    consumer = EventConsumer(amqp_url=amqp_url, store=store, max_backoff_s=0.5, **names)
    monkeypatch.setattr(RobustQueue, "consume", consume_failing_once)
    await consumer.start()
    try:
        await publish_raw(amqp_url, messages=[as_message(e) for e in events], **names)
        await eventually(lambda: len(store.rows) == len(events), what="the events, consumed after the retry")
    finally:
        await consumer.close()
    assert failures, "the drop was to happen"
