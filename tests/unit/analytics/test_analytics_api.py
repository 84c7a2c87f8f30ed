from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.main import create_app
from services.analytics.settings import Settings
from tests.unit.analytics.analytics_events import T0, responded, submitted
from tests.unit.analytics.analytics_fakes import FakeLibrary
from tests.unit.analytics.analytics_fixture import LIBRARY, load

pytestmark = pytest.mark.unit

TOKEN = "unit-test-service-token"
AUTH = {"X-Service-Token": TOKEN}
RANGE = {"from": "2025-03-01T12:00:00Z", "to": "2025-03-01T12:10:00Z"}
REPORTS = ["summary", "timeseries", "top-queries", "gaps", "documents", "models", "feedback", "export.csv"]
LISTS = ["top-queries", "gaps", "documents", "models", "feedback"]


@dataclass
class FakeConsumer:
    connected: bool = True


@pytest.fixture
def store(tmp_path) -> SqlEventStore:
    store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/analytics.db")
    store.create_schema()
    yield store
    store.close()


def app_with(store: SqlEventStore, tmp_path, *, consumer_connected: bool = True, **settings):
    # No lifespan here: the test puts the store and doubles where the lifespan would put the real ones.
    app = create_app(Settings(service_token=TOKEN, data_dir=tmp_path, **settings))
    app.state.store, app.state.consumer = store, FakeConsumer(consumer_connected)
    app.state.library = FakeLibrary(LIBRARY)
    return app


@pytest.fixture
async def client(store: SqlEventStore, tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app_with(store, tmp_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://analytics") as client:
        yield client


async def test_summary_of_the_fixture_range(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    load(store)
    response = await client.get("/analytics/summary", params=RANGE, headers=AUTH)
    assert response.status_code == 200
    body = response.json()
    assert (body["from"], body["to"], body["model"]) == ("2025-03-01T12:00:00Z", "2025-03-01T12:10:00Z", None)
    assert (body["queries"], body["completed"], body["answered"], body["failed"]) == (8, 7, 3, 2)
    assert body["latency_ms"] == {"p50": 100.0, "p95": pytest.approx(790.0), "p99": pytest.approx(958.0)}
    assert body["failures_by_stage"] == {"generation": 1, "retrieval": 1}


async def test_model_filters_every_report(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    load(store)
    params = RANGE | {"model": "gpt-x"}
    summary = (await client.get("/analytics/summary", params=params, headers=AUTH)).json()
    assert (summary["model"], summary["queries"], summary["answered"], summary["failed"]) == ("gpt-x", 3, 1, 1)
    models = (await client.get("/analytics/models", params=params, headers=AUTH)).json()
    # gpt-x's share of every model's completed requests in the range, not of the two it selects
    items = [(m["model"], m["requests"], m["share"]) for m in models["items"]]
    assert items == [("gpt-x", 2, pytest.approx(2 / 7))]
    top = (await client.get("/analytics/top-queries", params=params, headers=AUTH)).json()
    assert sorted(item["query"] for item in top["items"]) == ["Export data", "Pending question",
                                                              "what is the REFUND policy?"]


async def test_minute_series_through_the_api(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    load(store)
    response = await client.get("/analytics/timeseries", params=RANGE | {"bucket": "minute"}, headers=AUTH)
    body = response.json()
    assert (response.status_code, body["bucket"], body["tz"], len(body["points"])) == (200, "minute", "UTC", 10)
    assert [p["queries"] for p in body["points"]] == [2, 1, 0, 3, 1, 0, 1, 0, 0, 0]
    assert body["points"][2] == {"start": "2025-03-01T12:02:00Z", "queries": 0, "answered": 0, "no_answer": 0,
                                 "failed": 0, "answered_rate": None,
                                 "latency_ms": {"p50": None, "p95": None, "p99": None}}


async def test_a_series_in_new_york_across_its_clocks_going_back(
    client: httpx.AsyncClient, store: SqlEventStore
) -> None:
    for n, moment in enumerate(["2026-11-01T05:10:00Z", "2026-11-01T05:20:00Z", "2026-11-01T06:10:00Z"]):
        store.add(to_record(submitted(at=datetime.fromisoformat(moment), request_id=f"ny{n}")))
    params = {"from": "2026-11-01T04:00:00Z", "to": "2026-11-01T07:00:00Z", "tz": "America/New_York"}
    response = await client.get("/analytics/timeseries", params=params, headers=AUTH)
    body = response.json()
    assert (response.status_code, body["tz"], body["bucket"], body["from"]) == (200, "America/New_York", "hour",
                                                                                "2026-11-01T04:00:00Z")
    assert [(p["start"], p["queries"]) for p in body["points"]] == [
        ("2026-11-01T00:00:00-04:00", 0), ("2026-11-01T01:00:00-04:00", 2), ("2026-11-01T01:00:00-05:00", 1),
    ]


async def test_the_list_reports_answer_and_honour_limit(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    load(store)
    for report in LISTS:
        response = await client.get(f"/analytics/{report}", params=RANGE | {"limit": 1}, headers=AUTH)
        assert response.status_code == 200, (report, response.text)
        body = response.json()
        lists = [value for value in body.values() if isinstance(value, list)]
        assert lists and all(len(items) == 1 for items in lists), (report, body)


async def test_documents_name_the_never_cited_ones(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    load(store)
    body = (await client.get("/analytics/documents", params=RANGE, headers=AUTH)).json()
    assert [d["doc_id"] for d in body["most_cited"]] == ["guide", "admin", "faq", "policy"]
    assert (body["never_cited"], body["never_cited_total"]) == (["handbook", "zeta"], 2)
    cut = (await client.get("/analytics/documents", params=RANGE | {"limit": 1}, headers=AUTH)).json()
    assert (cut["never_cited"], cut["never_cited_total"]) == (["handbook"], 2)


async def test_the_unknown_model_of_the_models_report_can_be_chosen(
    client: httpx.AsyncClient, store: SqlEventStore
) -> None:
    store.add(to_record(submitted(request_id="n", model=None)))
    store.add(to_record(responded(request_id="n", model=None)))
    listed = (await client.get("/analytics/models", headers=AUTH)).json()["items"]
    assert [(item["model"], item["requests"]) for item in listed] == [("unknown", 1)]
    body = (await client.get("/analytics/summary", params={"model": "unknown"}, headers=AUTH)).json()
    assert (body["model"], body["queries"], body["answered"]) == ("unknown", 1, 1)


async def test_export_is_csv_with_one_row_per_request(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    load(store)
    response = await client.get("/analytics/export.csv", params=RANGE, headers=AUTH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [(r["request_id"], r["outcome"]) for r in rows] == [
        ("a", "answered"), ("b", "answered"), ("c", "no_answer"), ("d", "small_talk"), ("e", "failed"),
        ("f", "failed"), ("g", "pending"), ("h", "answered"),
    ]


async def test_an_empty_store_answers_every_report(client: httpx.AsyncClient) -> None:
    for report in REPORTS:
        response = await client.get(f"/analytics/{report}", headers=AUTH)
        assert response.status_code == 200, (report, response.text)


async def test_summary_honours_the_time_range(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    store.add(to_record(submitted(at=T0, request_id="a")))
    store.add(to_record(submitted(at=T0 + timedelta(hours=1), request_id="b")))
    response = await client.get(
        "/analytics/summary", params={"from": "2025-03-01T12:30:00Z", "to": "2025-03-01T15:30:00+02:00"}, headers=AUTH
    )
    body = response.json()
    assert (body["queries"], body["from"], body["to"]) == (1, "2025-03-01T12:30:00Z", "2025-03-01T13:30:00Z")


async def test_a_time_without_offset_is_taken_as_utc(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    store.add(to_record(submitted(at=T0)))
    response = await client.get("/analytics/summary", params={"from": "2025-03-01T12:00:00"}, headers=AUTH)
    assert (response.json()["queries"], response.json()["from"]) == (1, "2025-03-01T12:00:00Z")


async def test_an_offset_whose_plus_arrived_as_a_space_keeps_its_sign(
    client: httpx.AsyncClient, store: SqlEventStore
) -> None:
    # As typed into curl or a browser's address bar: a query string reads an unencoded "+" as a space.
    store.add(to_record(submitted(at=T0, request_id="a")))
    store.add(to_record(submitted(at=T0 + timedelta(hours=1), request_id="b")))
    response = await client.get(
        "/analytics/summary?from=2025-03-01T14:00:00+02:00&to=2025-03-01T14:59:59.5+0200", headers=AUTH
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["queries"], body["from"], body["to"]) == (1, "2025-03-01T12:00:00Z", "2025-03-01T12:59:59.500000Z")


async def test_a_bound_beyond_what_utc_can_hold_is_clamped(client: httpx.AsyncClient, store: SqlEventStore) -> None:
    store.add(to_record(submitted(at=T0)))
    params = {"from": "0001-01-01T00:00:00+05:00", "to": "9999-12-31T23:00:00-05:00"}
    body = (await client.get("/analytics/summary", params=params, headers=AUTH)).json()
    assert (body["queries"], body["from"], body["to"]) == (1, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z")


@pytest.mark.parametrize("report", REPORTS)
async def test_no_service_token_is_401(client: httpx.AsyncClient, report: str) -> None:
    for headers in ({}, {"X-Service-Token": "wrong"}):
        response = await client.get(f"/analytics/{report}", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"


@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize(
    "params",
    [
        {"from": "yesterday"},
        {"to": "2025-13-45"},
        {"from": "2025-03-02T00:00:00Z", "to": "2025-03-01T00:00:00Z"},
        {"to": "1700000000"},  # a Unix timestamp is not ISO 8601, though pydantic would read it
        {"from": "0.5"},
        {"model": ""},
        {"model": "m" * 129},
        {"model": "x\x00"},  # PostgreSQL fails on U+0000 in a comparison: refused before it
        {"model": "a\nb"},
    ],
)
async def test_a_bad_range_or_model_is_422(client: httpx.AsyncClient, report: str, params: dict) -> None:
    response = await client.get(f"/analytics/{report}", params=params, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"
    assert next(iter(params)) in response.json()["message"]


@pytest.mark.parametrize("report", LISTS)
@pytest.mark.parametrize("limit", ["0", "1001", "-1", "ten"])
async def test_a_limit_outside_1_to_1000_is_422(client: httpx.AsyncClient, report: str, limit: str) -> None:
    response = await client.get(f"/analytics/{report}", params={"limit": limit}, headers=AUTH)
    assert (response.status_code, response.json()["error"]) == (422, "invalid_request")
    assert "limit" in response.json()["message"]


@pytest.mark.parametrize("bucket", ["week", "", "HOUR"])
async def test_an_unknown_bucket_is_422(client: httpx.AsyncClient, bucket: str) -> None:
    response = await client.get("/analytics/timeseries", params={"bucket": bucket}, headers=AUTH)
    assert (response.status_code, response.json()["error"]) == (422, "invalid_request")
    assert "bucket" in response.json()["message"]


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "", "utc", "America", "../etc/passwd", "localtime", "x" * 65])
async def test_an_unknown_time_zone_is_422(client: httpx.AsyncClient, tz: str) -> None:
    response = await client.get("/analytics/timeseries", params={"tz": tz}, headers=AUTH)
    assert (response.status_code, response.json()["error"]) == (422, "invalid_request")
    assert "tz" in response.json()["message"]


async def test_more_than_ten_thousand_buckets_is_422(client: httpx.AsyncClient) -> None:
    params = {"bucket": "minute", "from": "2025-01-01T00:00:00Z", "to": "2025-02-01T00:00:00Z"}
    response = await client.get("/analytics/timeseries", params=params, headers=AUTH)
    assert (response.status_code, response.json()["error"]) == (422, "invalid_request")
    assert response.json()["message"].startswith("bucket: the range holds 44,640 minute buckets")
    assert (await client.get("/analytics/timeseries", params=params | {"bucket": "hour"}, headers=AUTH)).status_code == 200


async def test_database_down_is_503_naming_it_on_every_report(tmp_path) -> None:
    unreachable = SqlEventStore.from_url("postgresql+psycopg://postgres@127.0.0.1:1/none", timeout_s=1)
    app = app_with(unreachable, tmp_path, consumer_connected=False)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        for report in REPORTS:
            response = await client.get(f"/analytics/{report}", headers=AUTH)
            assert (response.status_code, response.json()["error"]) == (503, "database_unavailable"), report
        ready = await client.get("/readyz")
        assert (ready.status_code, ready.json()["checks"]) == (503, {"database": False, "database_writes": True, "broker": False})


async def test_readiness_reports_database_and_broker(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert (response.status_code, response.json()["checks"]) == (200, {"database": True, "database_writes": True, "broker": True})


async def test_each_priced_model_reports_the_cost_of_its_tokens(store: SqlEventStore, tmp_path) -> None:
    # DESIGN.md's per-model cost: tokens at MODEL_PRICES, US dollars per million; a model without a price has
    # no cost (null), not a cost of nought.
    at = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    for n, (model, tokens) in enumerate([("gpt-4o", (1000, 200, 1200)), ("gpt-4o", (3000, 600, 3600)),
                                         ("local-llama", (500, 100, 600)), ("cairn-extractive", (400, 80, 480))]):
        store.add(to_record(submitted(at=at, request_id=f"c{n}", model=model)))
        store.add(to_record(responded(at=at, request_id=f"c{n}", model=model, tokens=tokens)))
    prices = {"gpt-4o": {"input": 2.5, "output": 10.0}}
    app = app_with(store, tmp_path, model_prices=prices)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        body = (await client.get("/analytics/models", params=RANGE, headers=AUTH)).json()
    costs = {item["model"]: item["cost_usd"] for item in body["items"]}
    assert costs == {"gpt-4o": pytest.approx((4000 * 2.5 + 800 * 10.0) / 1_000_000), "local-llama": None,
                     "cairn-extractive": 0.0}  # the built-in offline model runs in Cairn: free unless priced
