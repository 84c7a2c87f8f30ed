"""The gateway's HTTP answers about who may do what, with fake stores: 401 vs 403, 503 when the
session store does not answer, /auth/sessions, and error bodies that say nothing more than they must."""
import asyncio

import pytest
from fastapi.testclient import TestClient

from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import add_user
from tests.support import free_port
from tests.unit.gateway.fakes import FakeSessionStore, FakeUserStore

pytestmark = pytest.mark.unit
PASSWORD = "correct horse"


@pytest.fixture
def fake_sessions() -> FakeSessionStore:
    return FakeSessionStore()


@pytest.fixture
def client(fake_sessions):
    users = FakeUserStore()
    for name, role in (("ann", "user"), ("ana", "analyst"), ("ada", "admin")):
        asyncio.run(add_user(users=users, username=name, password=PASSWORD, roles=[role]))
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing is forwarded in these tests
    settings = Settings(
        redis_url=f"redis://127.0.0.1:{free_port()}/0",  # nothing answers: only the fakes below are used
        chat_url=nowhere,
        analytics_url=nowhere,
        retrieval_url=nowhere,
        login_attempts_per_username=0,  # no login limits, so no rate-limit store is needed
        login_attempts_per_ip=0,
    )
    with TestClient(create_app(settings)) as client:
        client.app.state.users, client.app.state.sessions = users, fake_sessions
        yield client


def _auth(client, username="ann") -> dict[str, str]:
    response = client.post("/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _assert_plain_error(response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "message"} and body["error"] == error
    assert "Traceback" not in response.text and "Error" not in body["message"]


@pytest.mark.parametrize(
    "method,path,allowed",
    [
        ("get", "/api/analytics/summary", {"ana", "ada"}),
        ("get", "/api/documents", {"ada"}),
        ("delete", "/api/documents/some-doc", {"ada"}),
    ],
)
def test_a_known_user_without_the_role_gets_403_and_no_token_gets_401(client, method, path, allowed):
    for username in {"ann", "ana", "ada"} - allowed:
        _assert_plain_error(getattr(client, method)(path, headers=_auth(client, username)), 403, "forbidden")
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        response = getattr(client, method)(path, headers=headers)
        _assert_plain_error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"


def test_the_session_store_down_is_503_never_401_or_200(client, fake_sessions):
    headers = _auth(client)
    fake_sessions.down = True
    for method, path in (("get", "/auth/me"), ("post", "/api/chat"), ("get", "/auth/sessions"), ("post", "/auth/logout")):
        _assert_plain_error(getattr(client, method)(path, headers=headers), 503, "session_store_unavailable")
    _assert_plain_error(
        client.post("/auth/login", json={"username": "ann", "password": PASSWORD}), 503, "session_store_unavailable"
    )
    fake_sessions.down = False
    assert client.get("/auth/me", headers=headers).status_code == 200


def test_sessions_are_listed_by_public_id_and_ended_one_by_one(client, fake_sessions):
    other, mine = _auth(client), _auth(client)
    listed = client.get("/auth/sessions", headers=mine)
    assert listed.status_code == 200
    sessions = listed.json()["sessions"]
    assert [s["current"] for s in sessions] == [False, True]
    assert set(sessions[0]) == {"id", "created_at", "last_seen", "expires_at", "current"}
    for digest in fake_sessions.sessions:  # neither the digest nor any token leaves the gateway
        assert digest not in listed.text and digest[:16] not in listed.text
    assert other["Authorization"][7:] not in listed.text and mine["Authorization"][7:] not in listed.text

    assert client.delete(f"/auth/sessions/{sessions[0]['id']}", headers=mine).status_code == 204
    _assert_plain_error(client.get("/auth/me", headers=other), 401, "unauthorized")
    _assert_plain_error(client.delete(f"/auth/sessions/{sessions[0]['id']}", headers=mine), 404, "not_found")
    assert [s["current"] for s in client.get("/auth/sessions", headers=mine).json()["sessions"]] == [True]


def test_someone_elses_session_cannot_be_ended(client):
    ann, ada = _auth(client, "ann"), _auth(client, "ada")
    adas = client.get("/auth/sessions", headers=ada).json()["sessions"][0]["id"]
    _assert_plain_error(client.delete(f"/auth/sessions/{adas}", headers=ann), 404, "not_found")
    assert client.get("/auth/me", headers=ada).status_code == 200


def test_a_body_that_is_not_sent_as_json_is_415_that_says_so(client):
    """curl -d without -H sends a form type: the body is refused for its type, not with a 422 naming no field."""
    body = '{"username": "ann", "password": "correct horse"}'
    for headers in ({"Content-Type": "application/x-www-form-urlencoded"}, {"Content-Type": "text/plain"}, {}):
        response = client.post("/auth/login", content=body, headers=headers)
        _assert_plain_error(response, 415, "unsupported_media_type")
        assert "Content-Type: application/json" in response.json()["message"]
    for content_type in ("application/json; charset=utf-8", "application/merge-patch+json"):
        assert client.post("/auth/login", content=body, headers={"Content-Type": content_type}).status_code == 200
    # /v1 answers it in OpenAI's shape after admitting the question, which needs Redis: see
    # tests/integration/gateway/test_role_matrix.py::test_a_caller_let_through_hears_what_is_wrong_with_the_body
