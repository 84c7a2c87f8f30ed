"""/api/analytics/{report} through the gateway, on the real Redis, to a stand-in analytics service over
real HTTP: analysts and admins only, the query string and the content type passed on as they are, and a
503 that names analytics whether analytics is down or answers 503 itself."""
from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from services.analytics import models
from services.gateway.main import create_app
from tests.integration.gateway.analytics_stand_in import EXPORT_CSV, PASSWORD, StandInState, analytics_stand_in, gateway_settings
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.integration

REPORTS = {
    "summary": models.SummaryResponse,
    "timeseries": models.TimeSeriesResponse,
    "top-queries": models.TopQueriesResponse,
    "gaps": models.ContentGapsResponse,
    "documents": models.DocumentsResponse,
    "models": models.ModelsResponse,
    "feedback": models.FeedbackResponse,
}
RANGE = {"from": "2026-01-01T09:00:00+00:00", "to": "2026-01-01T12:00:00+00:00"}


@pytest.fixture(scope="module")
def stand_in() -> StandInState:
    return StandInState()


@pytest.fixture(scope="module")
def analytics_url(stand_in):
    with serve_in_thread(analytics_stand_in(stand_in)) as url:
        yield url


@pytest.fixture
def client(redis_url, amqp_url, unique, analytics_url, stand_in):
    stand_in.seen.clear()
    stand_in.unavailable = False
    stand_in.unavailable_as = StandInState.unavailable_as
    stand_in.delay_s = 0.0
    with TestClient(create_app(gateway_settings(redis_url, amqp_url, unique, analytics_url))) as client:
        yield client


def _auth(client, username: str) -> dict[str, str]:
    response = client.post("/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


@pytest.mark.parametrize("report", REPORTS)
def test_every_report_reaches_analytics_with_its_query_string_and_comes_back_as_sent(client, stand_in, report):
    ana = _auth(client, "ana")
    query = [*RANGE.items(), ("model", "offline"), ("limit", "5"), ("bucket", "hour")]
    response = client.get(f"/api/analytics/{report}", params=query, headers=ana)

    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    body = REPORTS[report].model_validate(response.json())
    assert body.model == "offline" and body.from_.isoformat() == RANGE["from"] and body.to.isoformat() == RANGE["to"]
    path, sent, headers = stand_in.seen[-1]
    assert path == f"/analytics/{report}"
    assert sent == str(httpx.QueryParams(query))  # every parameter, in the order sent
    assert headers["x-user-roles"] == "analyst" and headers["x-service-token"]
    assert "authorization" not in headers


def test_the_csv_export_keeps_its_type_and_file_name(client, stand_in):
    response = client.get("/api/analytics/export.csv", params=RANGE, headers=_auth(client, "ada"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == 'attachment; filename="cairn-requests.csv"'
    assert response.text == EXPORT_CSV
    assert stand_in.seen[-1][0] == "/analytics/export.csv" and stand_in.seen[-1][2]["x-user-roles"] == "admin"


def test_a_plain_user_is_refused_before_analytics_is_asked(client, stand_in):
    response = client.get("/api/analytics/summary", params=RANGE, headers=_auth(client, "ann"))
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert stand_in.seen == []


def test_a_report_name_cannot_leave_the_analytics_prefix(client, stand_in):
    response = client.get("/api/analytics/..%2Fhealthz", headers=_auth(client, "ana"))
    assert response.status_code == 404 and response.json()["error"] == "not_found"
    assert stand_in.seen == []  # a report name holds no "/": no route matches, nothing is forwarded


@pytest.mark.parametrize("report", ["summary", "export.csv"])
def test_a_503_from_analytics_is_a_503_naming_analytics(client, stand_in, report):
    ana = _auth(client, "ana")
    stand_in.unavailable = True
    response = client.get(f"/api/analytics/{report}", params=RANGE, headers=ana)
    assert response.status_code == 503
    assert response.json() == {"error": "analytics_unavailable", "message": "analytics is unavailable: database is unavailable"}


def test_retrieval_down_behind_analytics_is_named_as_retrieval(client, stand_in):
    """The documents report asks retrieval for the document list: its outage is retrieval's, not analytics'."""
    ana = _auth(client, "ana")
    stand_in.unavailable, stand_in.unavailable_as = True, ("retrieval_unavailable", "retrieval is unavailable")
    response = client.get("/api/analytics/documents", params=RANGE, headers=ana)
    assert (response.status_code, response.headers["retry-after"]) == (503, "7")
    assert response.json() == {"error": "retrieval_unavailable", "message": "retrieval is unavailable"}


@pytest.mark.parametrize("report", ["summary", "export.csv"])
def test_analytics_down_is_a_503_naming_analytics(redis_url, amqp_url, unique, report):
    nowhere = f"http://127.0.0.1:{free_port()}"
    with TestClient(create_app(gateway_settings(redis_url, amqp_url, unique, nowhere))) as client:
        response = client.get(f"/api/analytics/{report}", params=RANGE, headers=_auth(client, "ana"))
    assert response.status_code == 503
    assert response.json() == {"error": "analytics_unavailable", "message": "analytics is unavailable"}


@pytest.mark.parametrize("report", ["summary", "export.csv"])
def test_analytics_silent_past_the_upstream_timeout_is_a_504_naming_analytics(redis_url, amqp_url, unique, analytics_url, stand_in, report):
    settings = gateway_settings(redis_url, amqp_url, unique, analytics_url).model_copy(update={"upstream_timeout_s": 0.2})
    stand_in.delay_s = 1.0
    try:
        with TestClient(create_app(settings)) as client:
            response = client.get(f"/api/analytics/{report}", params=RANGE, headers=_auth(client, "ana"))
    finally:
        stand_in.delay_s = 0.0
    assert response.status_code == 504
    assert response.json() == {"error": "analytics_timeout", "message": "analytics did not answer in time"}
