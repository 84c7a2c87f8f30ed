"""settle_batch: a batch of messages stored in one commit and acked only after it, with invalid messages
dead-lettered one by one and a failing batch falling back to one event at a time."""
from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from services.analytics.handler import Outcome, settle, settle_batch
from shared.logging import json_handler
from tests.unit.analytics.analytics_events import feedback, responded, submitted
from tests.unit.analytics.analytics_fakes import FakeChannel, FakeDeadLetters, FakeEventStore, FakeMessage

pytestmark = pytest.mark.unit

LIMIT = 5


def body_of(event) -> bytes:
    return event.model_dump_json().encode()


def on_one_channel(store: FakeEventStore, *bodies: bytes, earlier_deliveries: int | None = None) -> list[FakeMessage]:
    """Deliveries on one channel whose settlements go in the store's journal, beside its commits."""
    channel = FakeChannel(store.journal)
    return [channel.deliver(body, earlier_deliveries=earlier_deliveries) for body in bodies]


async def settle_all(
    messages: list[FakeMessage], store: FakeEventStore, dead: FakeDeadLetters | None = None, **kw
) -> list[Outcome]:
    kw.setdefault("stop", asyncio.Event())
    return await settle_batch(
        messages, store=store, dead_letters=dead or FakeDeadLetters(), delivery_limit=LIMIT, **kw
    )


async def test_a_batch_is_stored_in_one_commit_and_each_message_acked_once_after_it() -> None:
    store = FakeEventStore()
    events = [submitted(request_id="a"), responded(request_id="a"), feedback(), submitted(request_id="b")]
    messages = on_one_channel(store, *map(body_of, events))
    assert await settle_all(messages, store) == [Outcome.ACK] * 4
    assert store.batches == [4]
    assert store.journal[0] == ("commit", 4)
    assert sorted(store.journal[1:]) == [("ack", tag) for tag in (1, 2, 3, 4)]
    assert all(message.settled == [("ack", None)] for message in messages)
    assert set(store.rows) == {str(event.event_id) for event in events}


async def test_an_event_twice_in_one_batch_is_stored_once_and_both_messages_acked() -> None:
    store, twice, once = FakeEventStore(), body_of(responded()), body_of(submitted())
    messages = on_one_channel(store, twice, once, twice)
    assert await settle_all(messages, store) == [Outcome.ACK] * 3
    assert len(store.rows) == 2 and store.batches == [3]
    assert all(message.settled == [("ack", None)] for message in messages)


async def test_invalid_messages_are_dead_lettered_with_their_reason_and_the_rest_stored() -> None:
    store, dead = FakeEventStore(), FakeDeadLetters()
    good = [submitted(request_id="g1"), submitted(request_id="g2")]
    messages = on_one_channel(store, body_of(good[0]), b"{not json", body_of(good[1]), b'{"event_type": "Unknown"}')
    outcomes = await settle_all(messages, store, dead)
    assert outcomes == [Outcome.ACK, Outcome.DEAD_LETTER, Outcome.ACK, Outcome.DEAD_LETTER]
    assert [(body, reason[:32]) for body, reason in dead.sent] == [
        (b"{not json", "Invalid JSON: key must be a stri"),
        (b'{"event_type": "Unknown"}', "Input tag 'Unknown' found using "),
    ]
    assert store.batches == [2] and set(store.rows) == {str(event.event_id) for event in good}
    # Each dead letter is acked once the broker confirmed it; the stored ones after the commit.
    assert store.journal == [("ack", 2), ("ack", 4), ("commit", 2), ("ack", 1), ("ack", 3)]
    assert all(message.settled == [("ack", None)] for message in messages)


async def test_a_batch_of_invalid_messages_never_reaches_the_store() -> None:
    store, dead = FakeEventStore(), FakeDeadLetters()
    messages = on_one_channel(store, b"[]", b"{}")
    assert await settle_all(messages, store, dead) == [Outcome.DEAD_LETTER] * 2
    assert store.batches == [] and len(dead.sent) == 2


async def test_a_failing_batch_is_stored_one_by_one_so_the_bad_event_is_requeued_alone() -> None:
    store, events = FakeEventStore(), [submitted(request_id=f"e{i}") for i in range(3)]
    store.unstorable = {str(events[1].event_id)}
    messages = on_one_channel(store, *map(body_of, events), earlier_deliveries=1)
    assert await settle_all(messages, store) == [Outcome.ACK, Outcome.REQUEUE, Outcome.ACK]
    assert store.batches == [3, 1, 1, 1]
    assert [message.settled for message in messages] == [[("ack", None)], [("nack", True)], [("ack", None)]]
    assert set(store.rows) == {str(events[0].event_id), str(events[2].event_id)}


async def test_a_bad_event_on_its_last_delivery_is_dead_lettered_with_the_error_and_the_rest_stored() -> None:
    store, dead, events = FakeEventStore(), FakeDeadLetters(), [submitted(request_id=f"e{i}") for i in range(2)]
    store.unstorable = {str(events[0].event_id)}
    messages = on_one_channel(store, *map(body_of, events), earlier_deliveries=LIMIT)
    assert await settle_all(messages, store, dead) == [Outcome.DEAD_LETTER, Outcome.ACK]
    assert dead.sent == [(
        body_of(events[0]),
        f"store error: RuntimeError(\"cannot store ['{events[0].event_id}']\") (last of {LIMIT + 1} deliveries)",
    )]
    assert all(message.settled == [("ack", None)] for message in messages)
    assert list(store.rows) == [str(events[1].event_id)]


async def test_a_store_error_in_a_batch_of_one_requeues_without_a_second_attempt() -> None:
    store = FakeEventStore()
    store.broken = RuntimeError("disk full")
    [message] = on_one_channel(store, body_of(submitted()))
    assert await settle_all([message], store) == [Outcome.REQUEUE]
    assert store.batches == [1] and message.settled == [("nack", True)]


async def test_while_the_database_is_down_the_batch_is_held_and_retried_whole() -> None:
    store = FakeEventStore()
    store.down = True
    messages = on_one_channel(store, body_of(submitted(request_id="h1")), body_of(submitted(request_id="h2")))

    async def recover() -> None:
        while store.add_calls < 3:
            await asyncio.sleep(0.005)
        store.down = False

    recovering = asyncio.create_task(recover())
    outcomes = await settle_all(messages, store, retry_delay_s=0.01, max_retry_delay_s=0.02)
    await recovering
    assert outcomes == [Outcome.ACK] * 2
    assert set(store.batches) == {2} and store.add_calls >= 4
    assert store.journal[0] == ("commit", 2)  # nothing was settled while the database was down
    assert all(message.settled == [("ack", None)] for message in messages)


async def test_a_held_batch_is_requeued_on_shutdown_and_its_invalid_messages_still_dead_lettered() -> None:
    store, stop, dead = FakeEventStore(), asyncio.Event(), FakeDeadLetters()
    store.down = True
    messages = on_one_channel(store, body_of(submitted()), b"{not json", body_of(responded()), earlier_deliveries=LIMIT)
    settling = asyncio.create_task(settle_all(messages, store, dead, stop=stop, retry_delay_s=10))
    await asyncio.sleep(0.05)
    assert [message.settled for message in messages] == [[], [("ack", None)], []]
    stop.set()
    assert await asyncio.wait_for(settling, 2) == [Outcome.RETRY, Outcome.DEAD_LETTER, Outcome.RETRY]
    assert [message.settled for message in messages] == [[("nack", True)], [("ack", None)], [("nack", True)]]
    assert [body for body, _ in dead.sent] == [b"{not json"] and store.rows == {}


class FakeRenewals:
    """Records the messages sent back as fresh copies, and those it was asked to send; set `broken` to act as a
    publish the broker did not confirm."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.tried: list[bytes] = []
        self.broken: Exception | None = None

    async def send(self, message) -> None:
        self.tried.append(message.body)
        if self.broken is not None:
            raise self.broken
        self.sent.append(message.body)


async def test_a_held_message_the_broker_returned_before_is_renewed_and_the_rest_held() -> None:
    store, renewals = FakeEventStore(), FakeRenewals()
    store.down = True
    channel = FakeChannel(store.journal)
    bodies = [body_of(submitted(request_id=f"n{i}")) for i in range(3)]
    messages = [channel.deliver(bodies[0], earlier_deliveries=2), channel.deliver(bodies[1]),
                channel.deliver(bodies[2], earlier_deliveries=1)]

    async def recover() -> None:
        while store.add_calls < 3:
            await asyncio.sleep(0.005)
        store.down = False

    recovering = asyncio.create_task(recover())
    outcomes = await settle_all(messages, store, renewals=renewals, retry_delay_s=0.01, max_retry_delay_s=0.02)
    await recovering
    assert outcomes == [Outcome.RETRY, Outcome.ACK, Outcome.RETRY]
    assert renewals.sent == [bodies[0], bodies[2]]  # their copies come back with no delivery counted
    assert [message.settled for message in messages] == [[("ack", None)]] * 3
    assert set(store.batches) == {3, 1} and list(store.rows) == [submitted_id(bodies[1])]


async def test_a_held_batch_whose_messages_are_all_renewed_ends_without_waiting_for_the_database() -> None:
    store, renewals = FakeEventStore(), FakeRenewals()
    store.down = True
    messages = on_one_channel(store, body_of(submitted()), body_of(responded()), earlier_deliveries=1)
    outcomes = await asyncio.wait_for(settle_all(messages, store, renewals=renewals, retry_delay_s=10), 2)
    assert outcomes == [Outcome.RETRY] * 2 and store.batches == [2]
    assert [message.settled for message in messages] == [[("ack", None)]] * 2


async def test_a_renewal_the_broker_did_not_confirm_leaves_the_message_held_and_is_tried_again() -> None:
    store, renewals = FakeEventStore(), FakeRenewals()
    store.down = True
    renewals.broken = RuntimeError("not confirmed")  # its channel not restored yet after a reconnection, say
    [message] = on_one_channel(store, body_of(submitted()), earlier_deliveries=LIMIT)
    settling = asyncio.create_task(
        settle_all([message], store, renewals=renewals, retry_delay_s=0.01, max_retry_delay_s=0.02)
    )
    while store.add_calls < 3:
        await asyncio.sleep(0.005)
    assert message.settled == [] and renewals.sent == []
    renewals.broken = None
    assert await asyncio.wait_for(settling, 2) == [Outcome.RETRY]
    assert message.settled == [("ack", None)] and renewals.sent == [message.body]


async def test_after_a_renewal_failed_the_rest_of_the_batch_waits_for_the_next_retry() -> None:
    """A send may wait its whole timeout for the broker: a round of renewals ends at the first failure, so
    that a large held batch does not wait that long once per message at each retry."""
    store, renewals = FakeEventStore(), FakeRenewals()
    store.down = True
    renewals.broken = RuntimeError("not confirmed")
    bodies = [body_of(submitted(request_id=f"r{i}")) for i in range(3)]
    messages = on_one_channel(store, *bodies, earlier_deliveries=1)
    settling = asyncio.create_task(
        settle_all(messages, store, renewals=renewals, retry_delay_s=0.01, max_retry_delay_s=0.02)
    )
    while store.add_calls < 3:
        await asyncio.sleep(0.005)
    assert len(renewals.tried) >= 2 and set(renewals.tried) == {bodies[0]}, renewals.tried
    renewals.broken = None
    assert await asyncio.wait_for(settling, 2) == [Outcome.RETRY] * 3
    assert renewals.sent == bodies


def submitted_id(body: bytes) -> str:
    return json.loads(body)["event_id"]


def traced(request_id: str, trace_id: str):
    """An event published within the trace `trace_id`, as chat and the gateway publish them."""
    return submitted(request_id=request_id).model_copy(
        update={"trace_id": trace_id, "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    )


async def test_the_line_about_each_stored_event_carries_its_request_id_and_trace_id() -> None:
    written = io.StringIO()
    handler = json_handler("analytics", written)
    logger = logging.getLogger("services.analytics.handler")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        store = FakeEventStore()
        batch = [traced("a", "1" * 32), traced("b", "2" * 32)]
        await settle_all(on_one_channel(store, *map(body_of, batch)), store)
        # One at a time, as a batch whose commit failed is stored.
        await settle(
            FakeMessage(body_of(traced("c", "3" * 32))), store=store, dead_letters=FakeDeadLetters(),
            stop=asyncio.Event(), delivery_limit=LIMIT,
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [json.loads(line) for line in written.getvalue().splitlines()]
    assert [(line["message"], line["request_id"], line["trace_id"]) for line in lines] == [
        ("event stored", "a", "1" * 32), ("event stored", "b", "2" * 32), ("event stored", "c", "3" * 32),
    ]
