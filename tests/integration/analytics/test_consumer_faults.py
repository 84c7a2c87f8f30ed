"""Faults of the analytics consumer, as a real process on the real RabbitMQ: killed in the middle of a
burst (every event stored exactly once after a restart), and malformed messages (dead-lettered with the
reason while the consumer keeps going)."""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import aio_pika
import pytest

from shared.topology import dead_letter_names
from tests.integration.analytics.event_stream import (
    AnalyticsProcess,
    as_message,
    dead_lettered,
    delete_topology,
    publish_raw,
    queue_depth,
    stored_events,
)
from tests.unit.analytics.analytics_events import submitted

pytestmark = pytest.mark.integration

BURST = 2_000
BURST_BOUND_S = 90


@pytest.fixture
async def analytics(tmp_path: Path, amqp_url: str, unique: str) -> AsyncIterator[AnalyticsProcess]:
    process = AnalyticsProcess(
        data_dir=tmp_path / "data", amqp_url=amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics"
    )
    try:
        yield process
    finally:
        process.stop()
        await delete_topology(amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics")


async def rows_reach(process: AnalyticsProcess, count: int, *, deadline: float) -> list[tuple[str, str]]:
    while True:
        rows = stored_events(process.database_url)
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.02)


async def test_killed_in_the_middle_of_a_burst_then_restarted_stores_each_event_exactly_once(
    analytics: AnalyticsProcess, amqp_url: str, unique: str
) -> None:
    events = [submitted(request_id=f"burst-{i}", query=f"question {i}") for i in range(BURST)]
    started = time.monotonic()
    await asyncio.to_thread(analytics.start)
    publishing = asyncio.create_task(
        publish_raw(
            amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics", messages=[as_message(e) for e in events]
        )
    )
    await rows_reach(analytics, BURST // 10, deadline=started + BURST_BOUND_S)
    analytics.kill()
    at_kill = len(stored_events(analytics.database_url))
    assert 0 < at_kill < BURST, f"the kill was to land mid-burst, {at_kill} rows were in"
    await publishing  # every event confirmed by the broker, whatever the consumer's fate

    await asyncio.to_thread(analytics.start)
    rows = await rows_reach(analytics, BURST, deadline=started + BURST_BOUND_S)
    assert len(rows) == BURST, f"{len(rows)} rows after {time.monotonic() - started:.0f}s\n{analytics.log()}"
    assert await queue_depth(amqp_url, f"{unique}.analytics") == 0
    await asyncio.sleep(0.5)  # anything redelivered late would show up now
    rows = stored_events(analytics.database_url)
    counts = Counter(event_id for event_id, _ in rows)
    assert len(rows) == BURST and counts.most_common(1)[0][1] == 1
    assert set(counts) == {str(e.event_id) for e in events}
    print(f"\n{at_kill} rows at the kill; all {BURST} stored once {time.monotonic() - started:.1f}s after the start")


async def test_malformed_messages_are_dead_lettered_with_the_reason_and_the_consumer_keeps_going(
    analytics: AnalyticsProcess, amqp_url: str, unique: str
) -> None:
    valid = submitted(request_id="after-the-bad-ones")
    wrong_schema = json.dumps({"event_type": "QuerySubmitted", "source_service": "chat", "data": {}}).encode()
    future_version = submitted().model_dump_json().replace('"schema_version":1', '"schema_version":7').encode()
    bad = [
        ("analytics.query.submitted", b"{not json", "Invalid JSON: key must be a string at line 1 column 2"),
        ("analytics.query.submitted", wrong_schema, "QuerySubmitted.data.query: Field required"),
        ("analytics.feedback.received", future_version, "schema_version: 7 is not supported (1 to 1)"),
    ]
    await asyncio.to_thread(analytics.start)
    await publish_raw(
        amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics",
        messages=[(key, aio_pika.Message(body=body, message_id=f"bad-{i}")) for i, (key, body, _) in enumerate(bad)]
        + [as_message(valid)],
    )

    rows = await rows_reach(analytics, 1, deadline=time.monotonic() + 15)
    assert rows == [(str(valid.event_id), "QuerySubmitted")], analytics.log()
    dead = await dead_lettered(amqp_url, f"{unique}.analytics", len(bad))
    assert [m.body for m in dead] == [body for _, body, _ in bad]
    for message, (key, _, reason) in zip(dead, bad):
        headers = message.headers
        assert headers["x-cairn-dead-reason"] == reason
        assert headers["x-cairn-dead-routing-key"] == key == message.routing_key
        assert headers["x-cairn-dead-queue"] == f"{unique}.analytics"
        assert str(headers["x-cairn-dead-consumer"]).startswith("analytics@")
        assert "x-death" not in headers  # dead-lettered by the consumer with its reason, not by the broker
    assert [m.message_id for m in dead] == ["bad-0", "bad-1", "bad-2"]
    assert message.exchange == dead_letter_names(f"{unique}.analytics")[0]
    assert await queue_depth(amqp_url, f"{unique}.analytics") == 0
