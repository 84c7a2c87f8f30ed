"""The time series in a time zone, from the real pieces: questions published on RabbitMQ, stored by
`python -m services.analytics` on SQLite and on PostgreSQL, and read over HTTP from analytics and through
the gateway, which passes `tz` on with the rest of the query string."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from services.gateway.main import create_app as create_gateway_app
from services.gateway.settings import Settings as GatewaySettings
from tests.integration.analytics.event_stream import (
    AnalyticsProcess,
    as_message,
    delete_topology,
    publish_raw,
    stored_events,
)
from tests.integration.analytics.pg_databases import fresh_database
from tests.integration.gateway.analytics_stand_in import PASSWORD, seed_users
from tests.support import serve_in_thread, wait_until
from tests.unit.analytics.analytics_events import submitted

pytestmark = pytest.mark.integration

# New York's clocks go back at 06:00 UTC on 2026-11-01: 05:xx and 06:xx UTC are both 01:xx there, and
# 02:00 UTC is still 31 October. In India (+05:30) they are 10:40, 11:40 and 07:30.
ASKED = ["2026-11-01T02:00:00Z", "2026-11-01T05:10:00Z", "2026-11-01T05:40:00Z", "2026-11-01T06:10:00Z"]
NIGHT = {"from": "2026-11-01T04:00:00Z", "to": "2026-11-01T08:00:00Z"}


@pytest.fixture(params=["sqlite", "postgresql"])
def analytics(request, tmp_path: Path, amqp_url: str, unique: str) -> Iterator[AnalyticsProcess]:
    """A running analytics process on one backend, holding the questions of ASKED, published on the broker."""
    with _database(request.param, request) as db_url:
        process = AnalyticsProcess(
            data_dir=tmp_path / "data", amqp_url=amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics",
            db_url=db_url,
        )
        try:
            process.start()
            events = [submitted(at=datetime.fromisoformat(at), request_id=f"{unique}-{n}")
                      for n, at in enumerate(ASKED)]
            asyncio.run(publish_raw(amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics",
                                    messages=[as_message(event) for event in events]))
            wait_until(lambda: len(stored_events(process.database_url)) == len(events), timeout=30,
                       what="analytics to store the questions")
            yield process
        finally:
            process.stop()
            asyncio.run(delete_topology(amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics"))


def _database(backend: str, request: pytest.FixtureRequest) -> AbstractContextManager[str | None]:
    """The URL of a fresh PostgreSQL database, or None: analytics' own SQLite file."""
    if backend == "sqlite":
        return nullcontext(None)
    return fresh_database(request.getfixturevalue("postgres_server_url"))


def points(body: dict) -> list[tuple[str, int]]:
    return [(point["start"], point["queries"]) for point in body["points"]]


def test_hours_and_days_follow_the_clock_of_the_zone(analytics: AnalyticsProcess) -> None:
    def series(**params: str) -> dict:
        response = httpx.get(f"{analytics.url}/analytics/timeseries", params=params,
                             headers={"X-Service-Token": analytics.token}, timeout=10)
        assert response.status_code == 200, response.text
        return response.json()

    new_york = series(**NIGHT, bucket="hour", tz="America/New_York")
    assert new_york["tz"] == "America/New_York"
    assert points(new_york) == [("2026-11-01T00:00:00-04:00", 0), ("2026-11-01T01:00:00-04:00", 2),
                                ("2026-11-01T01:00:00-05:00", 1), ("2026-11-01T02:00:00-05:00", 0)]
    assert points(series(bucket="day", tz="America/New_York")) == [("2026-10-31T00:00:00-04:00", 1),
                                                                  ("2026-11-01T00:00:00-04:00", 3)]
    assert points(series(**NIGHT, bucket="hour", tz="Asia/Kolkata")) == [
        ("2026-11-01T09:00:00+05:30", 0), ("2026-11-01T10:00:00+05:30", 1), ("2026-11-01T11:00:00+05:30", 2),
        ("2026-11-01T12:00:00+05:30", 0), ("2026-11-01T13:00:00+05:30", 0),
    ]
    utc = series(bucket="day")
    assert (utc["tz"], points(utc)) == ("UTC", [("2026-11-01T00:00:00Z", 4)])


def test_the_gateway_passes_the_zone_on(
    analytics: AnalyticsProcess, redis_url: str, amqp_url: str, unique: str
) -> None:
    seed_users(redis_url, unique)
    settings = GatewaySettings(
        redis_url=redis_url, redis_prefix=unique, amqp_url=amqp_url, events_exchange=f"{unique}.events",
        analytics_queue=f"{unique}.analytics", analytics_url=analytics.url, service_token=analytics.token,
    )
    with serve_in_thread(create_gateway_app(settings)) as gateway:
        login = httpx.post(f"{gateway}/auth/login", json={"username": "ana", "password": PASSWORD}, timeout=10)
        analyst = {"Authorization": f"Bearer {login.json()['token']}"}
        url = f"{gateway}/api/analytics/timeseries"
        response = httpx.get(url, params=NIGHT | {"tz": "America/New_York"}, headers=analyst, timeout=10)
        assert response.status_code == 200, response.text
        assert points(response.json())[1:3] == [("2026-11-01T01:00:00-04:00", 2), ("2026-11-01T01:00:00-05:00", 1)]

        unknown = httpx.get(url, params=NIGHT | {"tz": "Mars/Olympus_Mons"}, headers=analyst, timeout=10)
        assert (unknown.status_code, unknown.json()["error"]) == (422, "invalid_request")
        assert "tz" in unknown.json()["message"]
