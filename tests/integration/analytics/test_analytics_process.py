"""`python -m services.analytics` as a real process: serves, consumes, and exits cleanly on SIGTERM,
finishing the message in hand so that a restart stores every event exactly once."""
from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.integration.analytics.event_stream import (
    AnalyticsProcess,
    as_message,
    delete_topology,
    publish_raw,
    queue_depth,
    stored_events,
)
from tests.unit.analytics.analytics_events import submitted

pytestmark = pytest.mark.integration


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


def log_lines(process: AnalyticsProcess) -> list[dict]:
    return [json.loads(line) for line in process.log_path.read_text().splitlines() if line.startswith("{")]


async def test_runs_as_a_module_and_stops_on_sigterm(analytics: AnalyticsProcess) -> None:
    await asyncio.to_thread(analytics.start)
    response = httpx.get(f"{analytics.url}/analytics/summary", headers={"X-Service-Token": analytics.token})
    assert response.status_code == 200, response.text
    assert stored_events(analytics.database_url) == []
    analytics.stop()
    # uvicorn shuts down gracefully, then re-raises the signal it caught.
    assert analytics.process.returncode in (0, -signal.SIGTERM), analytics.log()
    lines = log_lines(analytics)
    assert any(line["message"] == "Application shutdown complete." for line in lines), analytics.log()
    assert any(line["message"] == "consuming" and line.get("service") == "analytics" for line in lines)


async def test_sigterm_in_the_middle_of_a_burst_loses_nothing_and_stores_nothing_twice(
    analytics: AnalyticsProcess, amqp_url: str, unique: str
) -> None:
    events = [submitted(request_id=f"term-{i}") for i in range(1000)]
    await asyncio.to_thread(analytics.start)
    # Published while the consumer runs: batched commits would store a burst already queued before a stop lands.
    publishing = asyncio.create_task(
        publish_raw(
            amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics", messages=[as_message(e) for e in events],
            window=50, pause_s=0.1,  # 2 s in all: a fast consumer stored a burst published at once before the stop landed
        )
    )
    deadline = time.monotonic() + 60
    while len(stored_events(analytics.database_url)) < 100 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.to_thread(analytics.stop)
    await publishing
    assert analytics.process.returncode in (0, -signal.SIGTERM), analytics.log()
    at_stop = len(stored_events(analytics.database_url))
    assert 0 < at_stop < len(events), f"the stop was to land mid-burst, {at_stop} rows were in"
    assert not [line for line in log_lines(analytics) if line["message"] == "settling a batch failed"]

    await asyncio.to_thread(analytics.start)
    while len(stored_events(analytics.database_url)) < len(events) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    rows = stored_events(analytics.database_url)
    assert Counter(event_id for event_id, _ in rows) == Counter(str(e.event_id) for e in events)
    assert await queue_depth(amqp_url, f"{unique}.analytics") == 0
