"""Single bad events on the real RabbitMQ and the real store (SQLite and PostgreSQL): each is dead-lettered on
its first delivery with its reason, without reaching the database, while the good events of its batch are
stored."""
from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aio_pika
import pamqp.encode
import pytest

from services.analytics.adapters.consumer import EventConsumer
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.handler import Outcome
from tests.integration.analytics.event_stream import (
    as_message,
    dead_lettered,
    delete_topology,
    publish_raw,
    queue_depth,
    stored_events,
)
from tests.unit.analytics.analytics_events import submitted

pytestmark = pytest.mark.integration


@pytest.fixture
async def names(amqp_url: str, unique: str) -> AsyncIterator[dict[str, str]]:
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    yield names
    await delete_topology(amqp_url, **names)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'analytics.db'}"
    return request.getfixturevalue("postgres_url")


class WatchedStore(SqlEventStore):
    """The real store, noting the event_ids it was asked to store."""

    def __init__(self, url: str) -> None:
        super().__init__(SqlEventStore.from_url(url).engine)
        self.seen: list[str] = []

    def add_many(self, records):
        self.seen += [str(r.event_id) for r in records]
        return super().add_many(records)


def with_occurred_at(value: str, **fields) -> tuple[str, aio_pika.Message]:
    """A valid QuerySubmitted message whose occurred_at is `value` as written."""
    event = submitted(**fields)
    key, message = as_message(event)
    body = event.model_dump_json().replace(f'"occurred_at":"{event.occurred_at.isoformat().replace("+00:00", "Z")}"',
                                           f'"occurred_at":"{value}"')
    assert f'"occurred_at":"{value}"' in body
    message.body = body.encode()
    return key, message


async def consume(names: dict, amqp_url: str, store: WatchedStore, *, settled: int) -> EventConsumer:
    """A consumer that takes what is queued in one batch, run until `settled` messages are settled."""
    consumer = EventConsumer(amqp_url=amqp_url, store=store, batch_wait_ms=500, **names)
    await consumer.start()
    try:
        deadline = time.monotonic() + 20
        while sum(consumer.outcomes.values()) < settled and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a requeued message would be settled again by now
    finally:
        await consumer.close()
    return consumer


async def test_an_occurred_at_out_of_range_is_dead_lettered_at_once_and_its_batch_is_stored(
    amqp_url: str, names: dict, database_url: str
) -> None:
    soon = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    good = [submitted(request_id=f"good-{i}") for i in range(3)]
    bad_values = [
        "0001-01-01T03:00:00+05:00",  # before year 1 in UTC: the store overflowed
        "9999-12-31T23:00:00-05:00",  # after 9999 in UTC: the same
        "9999-12-31T23:59:59Z",  # stored before, then sat in every report's future
        "1970-01-01T00:00:00Z",  # a publisher's clock reset to the epoch
        (datetime.now(UTC) + timedelta(days=3)).isoformat(),  # a publisher's clock days ahead
    ]
    bad = [with_occurred_at(value, request_id=f"bad-{i}") for i, value in enumerate(bad_values)]
    late = with_occurred_at("2000-01-01T00:00:00Z", request_id="old")  # an old event delivered late is fine
    skewed = with_occurred_at(soon, request_id="skewed")  # so is a clock a little ahead
    messages = [as_message(good[0]), *bad[:3], as_message(good[1]), *bad[3:], late, skewed, as_message(good[2])]
    await publish_raw(amqp_url, **names, messages=messages)

    store = WatchedStore(database_url)
    consumer = await consume(names, amqp_url, store, settled=len(messages))

    dead = await dead_lettered(amqp_url, names["queue"], len(bad))
    assert [m.headers["x-cairn-dead-reason"] for m in dead] == [
        f"occurred_at: {datetime.fromisoformat(value).isoformat()} is out of range "
        "(2000-01-01T00:00:00Z to a day past the consumer's clock)"
        for value in bad_values
    ]
    assert all("x-death" not in m.headers for m in dead)
    assert consumer.outcomes == {Outcome.DEAD_LETTER: len(bad), Outcome.ACK: len(good) + 2}  # no requeue
    kept = {str(e.event_id) for e in good} | {m.message_id for _, m in (late, skewed)}
    assert set(store.seen) == kept  # the bad events never reached the database
    assert {event_id for event_id, _ in stored_events(database_url)} >= kept
    assert await queue_depth(amqp_url, names["queue"]) == 0


def microseconds_on_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have this process write every AMQP timestamp as microseconds since the epoch, as a publisher in
    another language might: a value pamqp reads back as a date some 50,000 years ahead, which it cannot hold."""
    as_microseconds = lambda value: struct.pack(">Q", int(value.timestamp() * 1_000_000))  # noqa: E731
    monkeypatch.setitem(pamqp.encode.METHODS, "timestamp", as_microseconds)
    monkeypatch.setattr(pamqp.encode, "timestamp", as_microseconds)  # timestamps in header tables


async def test_an_amqp_timestamp_beyond_year_9999_neither_drops_the_connection_nor_loses_the_batch(
    amqp_url: str, names: dict, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Such a timestamp failed to decode in the frame reader: the connection dropped, the message came back on
    the next one and dropped it again, and the broker dead-lettered every message in flight with it after its
    delivery limit, without a reason. The timestamp is only the message's; the event's time is in its body."""
    events = [submitted(request_id=f"stamped-{i}") for i in range(3)]
    key, stamped = as_message(events[1])
    stamped.timestamp = datetime.now(UTC)
    stamped.headers = {"sent-at": datetime.now(UTC)}
    with monkeypatch.context() as patch:
        microseconds_on_the_wire(patch)
        await publish_raw(amqp_url, **names, messages=[as_message(events[0]), (key, stamped), as_message(events[2])])

    store = WatchedStore(database_url)
    consumer = await consume(names, amqp_url, store, settled=len(events))

    assert consumer.outcomes == {Outcome.ACK: len(events)}
    assert {event_id for event_id, _ in stored_events(database_url)} >= {str(e.event_id) for e in events}
    assert await dead_lettered(amqp_url, names["queue"], 1, timeout=0.5) == []
    assert await queue_depth(amqp_url, names["queue"]) == 0


async def test_a_body_too_large_for_an_event_is_dead_lettered_at_once_and_its_batch_is_stored(
    amqp_url: str, names: dict, database_url: str
) -> None:
    """A valid event of megabytes (a forged or runaway question) went into the database, the reports and the
    exports whole; a batch of them held gigabytes in the consumer at once."""
    good = [submitted(request_id=f"small-{i}") for i in range(2)]
    huge = submitted(request_id="huge", query="why? " * 300_000)
    size = len(as_message(huge)[1].body)
    await publish_raw(amqp_url, **names, messages=[as_message(good[0]), as_message(huge), as_message(good[1])])

    store = WatchedStore(database_url)
    consumer = await consume(names, amqp_url, store, settled=3)

    [dead] = await dead_lettered(amqp_url, names["queue"], 1)
    assert dead.headers["x-cairn-dead-reason"] == f"body: {size} bytes, more than an event may have (1048576)"
    assert dead.message_id == str(huge.event_id) and len(dead.body) == size
    assert consumer.outcomes == {Outcome.DEAD_LETTER: 1, Outcome.ACK: 2}
    assert set(store.seen) == {str(e.event_id) for e in good}


async def test_nul_characters_in_every_string_are_stored_with_the_rest_of_their_batch(
    amqp_url: str, names: dict, database_url: str
) -> None:
    """PostgreSQL refuses U+0000 in text and jsonb: the store replaces it, so such an event is stored in its
    batch rather than failing it (this passed before the changes here; it guards the store's replacement)."""
    nul = "\u0000"
    body = {
        "event_type": "ResponseGenerated", "source_service": f"chat{nul}", "request_id": f"r{nul}",
        "trace_id": f"t{nul}", "traceparent": f"p{nul}", "user_id": f"u{nul}", "session_id": f"s{nul}",
        "data": {
            "query": f"q{nul}", "reformulated_query": f"rq{nul}", "answered": True, "model": f"m{nul}",
            "confidence_level": f"High{nul}", "cited_doc_ids": [f"d{nul}", f"d{nul}"], "conversation_id": f"c{nul}",
            "timings_ms": {f"total{nul}": 1.0}, "finish_reason": f"stop{nul}",
        },
    }
    with_nul = submitted(request_id="nul").model_copy(update={"event_id": uuid.uuid4()})
    raw = json.loads(with_nul.model_dump_json()) | body
    key, message = as_message(with_nul)
    message.body = json.dumps(raw).encode()
    assert b"\\u0000" in message.body
    feedback = json.dumps({"event_type": "FeedbackReceived", "source_service": "gateway", "event_id": str(uuid.uuid4()),
                           "data": {"rated_request_id": f"r{nul}", "rating": 1, "comment": f"no{nul}pe"}}).encode()
    good = submitted(request_id="clean")
    messages = [as_message(good), ("analytics.response.generated", message),
                ("analytics.feedback.received", aio_pika.Message(feedback, message_id="feedback"))]
    await publish_raw(amqp_url, **names, messages=messages)

    store = WatchedStore(database_url)
    consumer = await consume(names, amqp_url, store, settled=3)

    assert consumer.outcomes == {Outcome.ACK: 3}
    stored = {event_id for event_id, _ in stored_events(database_url)}
    assert {str(good.event_id), str(with_nul.event_id), json.loads(feedback)["event_id"]} <= stored
