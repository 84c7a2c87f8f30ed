from __future__ import annotations

import asyncio

import pytest

from services.analytics.handler import Outcome, handle, settle
from tests.unit.analytics.analytics_events import responded, submitted
from tests.unit.analytics.analytics_fakes import FakeDeadLetters, FakeEventStore, FakeMessage

pytestmark = pytest.mark.unit

LIMIT = 5


def body_of(event) -> bytes:
    return event.model_dump_json().encode()


async def settle_once(
    message: FakeMessage, store: FakeEventStore, dead: FakeDeadLetters | None = None, **kw
) -> Outcome:
    kw.setdefault("stop", asyncio.Event())
    return await settle(message, store=store, dead_letters=dead or FakeDeadLetters(), delivery_limit=LIMIT, **kw)


async def test_a_valid_event_is_stored_then_acked() -> None:
    store, message = FakeEventStore(), FakeMessage(body_of(submitted()))
    assert await settle_once(message, store) is Outcome.ACK
    assert message.settled == [("ack", None)]
    assert len(store.rows) == 1


async def test_a_redelivered_event_is_acked_and_not_stored_again() -> None:
    store, body = FakeEventStore(), body_of(responded())
    for _ in range(2):
        assert await settle_once(FakeMessage(body, earlier_deliveries=1), store) is Outcome.ACK
    assert len(store.rows) == 1


def with_version(version: int) -> bytes:
    return body_of(submitted()).replace(b'"schema_version":1', b'"schema_version":%d' % version)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json at all", "Invalid JSON: expected ident at line 1 column 2"),
        (b"\xff\xfe\x00", "Invalid JSON: "),
        (
            b'{"event_type": "QuerySubmitted"}',
            "QuerySubmitted.source_service: Field required; QuerySubmitted.data: Field required",
        ),
        (
            b'{"event_type": "Unknown", "source_service": "chat", "data": {}}',
            "Input tag 'Unknown' found using 'event_type'",
        ),
        (
            body_of(submitted()).replace(b'"QuerySubmitted"', b'"ResponseGenerated"'),
            "ResponseGenerated.data.answered: Field required",
        ),
        (
            body_of(responded()).replace(b'"latency_ms":', b'"latency_ms":1e400,"was":'),
            "ResponseGenerated.data.latency_ms: Input should be a finite number",
        ),
        (
            body_of(responded()).replace(b'"latency_ms":', b'"latency_ms":-5,"was":'),
            "ResponseGenerated.data.latency_ms: Input should be greater than or equal to 0",
        ),
        (with_version(2), "schema_version: 2 is not supported (1 to 1)"),
        (with_version(0), "schema_version: 0 is not supported"),
    ],
    ids=lambda value: "body" if isinstance(value, bytes) else None,  # events' bodies hold fresh event ids
)
async def test_an_invalid_body_is_dead_lettered_with_the_reason_then_acked(body: bytes, reason: str) -> None:
    store, message, dead = FakeEventStore(), FakeMessage(body), FakeDeadLetters()
    assert await settle_once(message, store, dead) is Outcome.DEAD_LETTER
    assert [sent_body for sent_body, _ in dead.sent] == [body]
    assert dead.sent[0][1].startswith(reason), dead.sent[0][1]
    assert message.settled == [("ack", None)]
    assert store.add_calls == 0


async def test_a_dead_letter_the_broker_did_not_confirm_is_requeued_not_acked() -> None:
    message, dead = FakeMessage(b"{not json"), FakeDeadLetters()
    dead.broken = ConnectionError("channel closed")
    assert await settle_once(message, FakeEventStore(), dead) is Outcome.REQUEUE
    assert message.settled == [("nack", True)]


async def test_an_unexpected_store_error_requeues_before_the_last_delivery() -> None:
    store, dead = FakeEventStore(), FakeDeadLetters()
    store.broken = RuntimeError("disk full")
    for earlier in (None, 0, LIMIT - 1):
        message = FakeMessage(body_of(submitted()), earlier_deliveries=earlier)
        assert await settle_once(message, store, dead) is Outcome.REQUEUE
        assert message.settled == [("nack", True)]
    assert dead.sent == [] and store.rows == {}


async def test_a_store_error_on_the_last_delivery_is_dead_lettered_with_the_error() -> None:
    store, dead, body = FakeEventStore(), FakeDeadLetters(), body_of(submitted())
    store.broken = RuntimeError("disk full")
    message = FakeMessage(body, earlier_deliveries=LIMIT)
    assert await settle_once(message, store, dead) is Outcome.DEAD_LETTER
    assert dead.sent == [(body, "store error: RuntimeError('disk full') (last of 6 deliveries)")]
    assert message.settled == [("ack", None)]


async def test_a_store_error_on_the_last_delivery_is_requeued_when_dead_lettering_fails() -> None:
    store, dead = FakeEventStore(), FakeDeadLetters()
    store.broken, dead.broken = RuntimeError("disk full"), TimeoutError()
    message = FakeMessage(body_of(submitted()), earlier_deliveries=LIMIT)
    assert await settle_once(message, store, dead) is Outcome.REQUEUE
    assert message.settled == [("nack", True)]  # the broker's delivery limit then dead-letters it


async def test_while_the_database_is_down_the_message_is_held_and_retried() -> None:
    store, message = FakeEventStore(), FakeMessage(body_of(submitted()), earlier_deliveries=LIMIT)
    store.down = True

    async def recover() -> None:
        while store.add_calls < 3:
            await asyncio.sleep(0.005)
        store.down = False

    recovering = asyncio.create_task(recover())
    outcome = await settle_once(message, store, retry_delay_s=0.01, max_retry_delay_s=0.02)
    await recovering
    assert outcome is Outcome.ACK
    assert message.settled == [("ack", None)]
    assert store.add_calls >= 4 and len(store.rows) == 1


async def test_a_held_message_is_requeued_on_shutdown_never_dead_lettered() -> None:
    store, stop, dead = FakeEventStore(), asyncio.Event(), FakeDeadLetters()
    message = FakeMessage(body_of(submitted()), earlier_deliveries=LIMIT)
    store.down = True
    settling = asyncio.create_task(settle_once(message, store, dead, stop=stop, retry_delay_s=10))
    await asyncio.sleep(0.05)
    assert message.settled == []
    stop.set()
    assert await asyncio.wait_for(settling, 2) is Outcome.RETRY
    assert message.settled == [("nack", True)]
    assert dead.sent == []


async def test_handle_returns_retry_when_the_database_is_down() -> None:
    store = FakeEventStore()
    store.down = True
    assert (await handle(body_of(submitted()), store=store)).outcome is Outcome.RETRY
