from __future__ import annotations

import asyncio

import pytest

from services.analytics.handler import Outcome, handle, settle
from tests.unit.analytics.analytics_events import responded, submitted
from tests.unit.analytics.analytics_fakes import FakeEventStore, FakeMessage

pytestmark = pytest.mark.unit


def body_of(event) -> bytes:
    return event.model_dump_json().encode()


async def test_a_valid_event_is_stored_then_acked() -> None:
    store, message = FakeEventStore(), FakeMessage(body_of(submitted()))
    assert await settle(message, store=store, stop=asyncio.Event()) is Outcome.ACK
    assert message.settled == [("ack", None)]
    assert len(store.rows) == 1


async def test_a_redelivered_event_is_acked_and_not_stored_again() -> None:
    store, body = FakeEventStore(), body_of(responded())
    for _ in range(2):
        assert await settle(FakeMessage(body), store=store, stop=asyncio.Event()) is Outcome.ACK
    assert len(store.rows) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b"\xff\xfe\x00",
        b'{"event_type": "QuerySubmitted"}',
        b'{"event_type": "Unknown", "source_service": "chat", "data": {}}',
        body_of(submitted()).replace(b'"QuerySubmitted"', b'"ResponseGenerated"'),
    ],
)
async def test_an_invalid_body_is_rejected_to_the_dead_letter_queue(body: bytes) -> None:
    store, message = FakeEventStore(), FakeMessage(body)
    assert await settle(message, store=store, stop=asyncio.Event()) is Outcome.DEAD_LETTER
    assert message.settled == [("reject", False)]
    assert store.add_calls == 0


async def test_an_unexpected_store_error_requeues() -> None:
    store, message = FakeEventStore(), FakeMessage(body_of(submitted()))
    store.broken = RuntimeError("disk full")
    assert await settle(message, store=store, stop=asyncio.Event()) is Outcome.REQUEUE
    assert message.settled == [("nack", True)]
    assert store.rows == {}


async def test_while_the_database_is_down_the_message_is_held_and_retried() -> None:
    store, message = FakeEventStore(), FakeMessage(body_of(submitted()))
    store.down = True

    async def recover() -> None:
        while store.add_calls < 3:
            await asyncio.sleep(0.005)
        store.down = False

    recovering = asyncio.create_task(recover())
    outcome = await settle(message, store=store, stop=asyncio.Event(), retry_delay_s=0.01, max_retry_delay_s=0.02)
    await recovering
    assert outcome is Outcome.ACK
    assert message.settled == [("ack", None)]
    assert store.add_calls >= 4 and len(store.rows) == 1


async def test_a_held_message_is_requeued_on_shutdown() -> None:
    store, message, stop = FakeEventStore(), FakeMessage(body_of(submitted())), asyncio.Event()
    store.down = True
    settling = asyncio.create_task(settle(message, store=store, stop=stop, retry_delay_s=10))
    await asyncio.sleep(0.05)
    assert message.settled == []
    stop.set()
    assert await asyncio.wait_for(settling, 2) is Outcome.RETRY
    assert message.settled == [("nack", True)]


async def test_handle_returns_retry_when_the_database_is_down() -> None:
    store = FakeEventStore()
    store.down = True
    assert await handle(body_of(submitted()), store=store) is Outcome.RETRY
