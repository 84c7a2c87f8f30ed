"""The analytics service on the real RabbitMQ: events published by the shared publisher end up counted."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from urllib.parse import urlparse

import aio_pika
import httpx
import pytest

from services.analytics.main import create_app
from services.analytics.settings import Settings
from shared.broker import RabbitEventPublisher, dead_letter_names
from tests.integration.analytics.tcp_proxy import TcpProxy
from tests.unit.analytics.analytics_events import responded, submitted

pytestmark = pytest.mark.integration

TOKEN = "integration-test-service-token"
AUTH = {"X-Service-Token": TOKEN}


@pytest.fixture
async def names(amqp_url: str, unique: str) -> AsyncIterator[dict[str, str]]:
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    yield names
    # Unique names keep tests apart; deleting them keeps quorum queues from piling up on the broker.
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        for queue in (names["queue"], dead_letter_names(names["queue"])[1]):
            await channel.queue_delete(queue)
        for exchange in (names["exchange"], dead_letter_names(names["queue"])[0]):
            await channel.exchange_delete(exchange)


def settings_for(tmp_path: Path, amqp_url: str, names: dict[str, str]) -> Settings:
    return Settings(
        service_token=TOKEN,
        data_dir=tmp_path,
        amqp_url=amqp_url,
        events_exchange=names["exchange"],
        analytics_queue=names["queue"],
    )


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout: float = 10.0, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
async def client(tmp_path: Path, amqp_url: str, names: dict[str, str]) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings_for(tmp_path, amqp_url, names))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:

            async def ready() -> bool:
                return (await client.get("/readyz")).status_code == 200

            await eventually(ready, what="analytics to be ready")
            yield client


async def publish(amqp_url: str, names: dict[str, str], *events) -> None:
    publisher = RabbitEventPublisher(amqp_url=amqp_url, exchange=names["exchange"], queue=names["queue"])
    await publisher.start()
    for event in events:
        publisher.submit(event)
    await publisher.close(timeout=10)
    assert publisher.published == len(events)


async def summary(client: httpx.AsyncClient) -> dict:
    response = await client.get("/analytics/summary", headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()


async def test_published_events_are_counted(client: httpx.AsyncClient, amqp_url: str, names: dict) -> None:
    await publish(amqp_url, names, submitted(request_id="x1"), responded(request_id="x1", total_ms=250.0, citations=3))

    async def counted() -> bool:
        body = await summary(client)
        return body["queries"] == 1 and body["answered"] == 1

    await eventually(counted, what="both events in the summary")
    body = await summary(client)
    assert (body["mean_latency_ms"], body["mean_citations"], body["unanswered"]) == (250.0, 3.0, 0)


async def test_the_same_event_twice_is_counted_once(client: httpx.AsyncClient, amqp_url: str, names: dict) -> None:
    twice = submitted(request_id="dup")
    # One consumer takes the queue in order, so once the marker is counted the duplicate has been handled.
    await publish(amqp_url, names, twice, twice, submitted(request_id="marker"))

    async def marker_counted() -> bool:
        return (await summary(client))["queries"] >= 2

    await eventually(marker_counted, what="the marker event")
    await asyncio.sleep(0.2)
    assert (await summary(client))["queries"] == 2


async def test_a_garbage_body_goes_to_the_dead_letter_queue(
    client: httpx.AsyncClient, amqp_url: str, names: dict
) -> None:
    garbage = b"{this is not an event"
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        exchange = await channel.get_exchange(names["exchange"])
        await exchange.publish(aio_pika.Message(body=garbage), routing_key="analytics.query.submitted")
        await publish(amqp_url, names, submitted(request_id="after-garbage"))

        async def valid_counted() -> bool:
            return (await summary(client))["queries"] == 1

        await eventually(valid_counted, what="the valid event after the garbage")
        dead = await channel.get_queue(dead_letter_names(names["queue"])[1])
        message = None

        async def dead_lettered() -> bool:
            nonlocal message
            message = await dead.get(no_ack=True, fail=False)
            return message is not None

        await eventually(dead_lettered, what="the garbage in the dead-letter queue")
        assert message.body == garbage
    body = await summary(client)
    assert (body["queries"], body["answered"], body["failed"]) == (1, 0, 0)


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
            assert (ready.status_code, ready.json()["checks"]) == (503, {"database": True, "broker": False})
            assert (await summary(client))["queries"] == 0
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
    app = create_app(settings_for(tmp_path, via_proxy, names))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:

        async def broker_ready() -> bool:
            return (await client.get("/readyz")).json()["checks"]["broker"]

        def queries(n: int) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                return (await summary(client))["queries"] == n

            return check

        async with app.router.lifespan_context(app):
            await asyncio.sleep(0.5)
            assert not await broker_ready()
            await proxy.start()
            await eventually(broker_ready, timeout=20, what="the first connection")
            await publish(amqp_url, names, submitted(request_id="before-drop"))
            await eventually(queries(1), what="the event before the drop")

            await proxy.stop()
            await eventually(lambda: _not(broker_ready), what="the drop to be noticed")
            await publish(amqp_url, names, submitted(request_id="during-drop"))  # waits in the durable queue
            await proxy.start()
            await eventually(queries(2), timeout=30, what="the event published while disconnected")
        await proxy.stop()


async def _not(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()
