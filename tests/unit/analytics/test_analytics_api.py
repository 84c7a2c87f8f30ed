from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.main import create_app
from services.analytics.settings import Settings
from tests.unit.analytics.analytics_events import T0, failed, responded, submitted
from tests.unit.analytics.analytics_fakes import FakeEventStore

pytestmark = pytest.mark.unit

TOKEN = "unit-test-service-token"
AUTH = {"X-Service-Token": TOKEN}


@dataclass
class FakeConsumer:
    connected: bool = True


@pytest.fixture
def store() -> FakeEventStore:
    return FakeEventStore()


@pytest.fixture
async def client(store: FakeEventStore, tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    # No lifespan here: the doubles stand where the lifespan would put the real store and consumer.
    app = create_app(Settings(service_token=TOKEN, data_dir=tmp_path))
    app.state.store, app.state.consumer = store, FakeConsumer()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        yield client


async def test_summary_counts_the_stored_events(client: httpx.AsyncClient, store: FakeEventStore) -> None:
    for event in (submitted(request_id="a"), submitted(request_id="b"), responded(request_id="a", total_ms=90.0,
                  citations=3), responded(request_id="b", answered=False, total_ms=30.0, citations=1), failed()):
        store.add(to_record(event))
    response = await client.get("/analytics/summary", headers=AUTH)
    assert response.status_code == 200
    assert response.json() == {
        "from": None, "to": None, "queries": 2, "answered": 1, "unanswered": 1, "failed": 1,
        "mean_latency_ms": 60.0, "mean_citations": 2.0,
    }


async def test_summary_honours_the_time_range(client: httpx.AsyncClient, store: FakeEventStore) -> None:
    store.add(to_record(submitted(at=T0)))
    store.add(to_record(submitted(at=T0 + timedelta(hours=1))))
    response = await client.get(
        "/analytics/summary", params={"from": "2025-03-01T12:30:00Z", "to": "2025-03-01T15:30:00+02:00"}, headers=AUTH
    )
    body = response.json()
    assert (body["queries"], body["from"], body["to"]) == (1, "2025-03-01T12:30:00Z", "2025-03-01T13:30:00Z")


async def test_a_time_without_offset_is_taken_as_utc(client: httpx.AsyncClient, store: FakeEventStore) -> None:
    store.add(to_record(submitted(at=T0)))
    response = await client.get("/analytics/summary", params={"from": "2025-03-01T12:00:00"}, headers=AUTH)
    assert (response.json()["queries"], response.json()["from"]) == (1, "2025-03-01T12:00:00Z")


async def test_no_service_token_is_401(client: httpx.AsyncClient) -> None:
    for headers in ({}, {"X-Service-Token": "wrong"}):
        response = await client.get("/analytics/summary", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    "params",
    [
        {"from": "yesterday"},
        {"to": "2025-13-45"},
        {"from": "2025-03-02T00:00:00Z", "to": "2025-03-01T00:00:00Z"},
        {"to": "1700000000"},  # a Unix timestamp is not ISO 8601, though pydantic would read it
        {"from": "0.5"},
    ],
)
async def test_a_bad_range_is_422(client: httpx.AsyncClient, params: dict) -> None:
    response = await client.get("/analytics/summary", params=params, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"
    assert next(iter(params)) in response.json()["message"]


async def test_a_bound_beyond_what_utc_can_hold_is_clamped(client: httpx.AsyncClient, store: FakeEventStore) -> None:
    store.add(to_record(submitted(at=T0)))
    params = {"from": "0001-01-01T00:00:00+05:00", "to": "9999-12-31T23:00:00-05:00"}
    body = (await client.get("/analytics/summary", params=params, headers=AUTH)).json()
    assert (body["queries"], body["from"], body["to"]) == (1, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z")


async def test_database_down_is_503_naming_it(client: httpx.AsyncClient, store: FakeEventStore) -> None:
    store.down = True
    response = await client.get("/analytics/summary", headers=AUTH)
    assert response.status_code == 503
    assert response.json()["error"] == "database_unavailable"


async def test_readiness_reports_database_and_broker(client: httpx.AsyncClient, store: FakeEventStore) -> None:
    response = await client.get("/readyz")
    assert (response.status_code, response.json()["checks"]) == (200, {"database": True, "broker": True})
    store.down = True
    response = await client.get("/readyz")
    assert (response.status_code, response.json()["checks"]) == (503, {"database": False, "broker": True})


async def test_real_store_on_an_unreachable_database_gives_503(tmp_path) -> None:
    app = create_app(Settings(service_token=TOKEN, data_dir=tmp_path))
    app.state.store = SqlEventStore.from_url("postgresql+psycopg://postgres@127.0.0.1:1/none", timeout_s=1)
    app.state.consumer = FakeConsumer(connected=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        response = await client.get("/analytics/summary", headers=AUTH)
        assert (response.status_code, response.json()["error"]) == (503, "database_unavailable")
        ready = await client.get("/readyz")
        assert ready.json()["checks"] == {"database": False, "broker": False}
