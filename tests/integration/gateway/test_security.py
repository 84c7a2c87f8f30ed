"""Issue 5's security acceptance against the real Redis: every way a token can be wrong gets 401, a
known user without the role 403, disabled users are out at once, error bodies say nothing more than
they must, and no log line carries a token. (Brute-force logins → 429: see test_rate_limits.py.
Redis down or hung → 503: see test_security_redis_outage.py.)"""
import asyncio
import hashlib
import logging

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from cairn import cli
from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import add_user
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery"
USERS = {"ann": "user", "ana": "analyst", "ada": "admin"}


def _chat_stand_in() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/chat")
    async def chat(request: Request) -> dict:
        return {"answer": "ok", "user": request.headers.get("x-user-id")}

    return app


@pytest.fixture(scope="module")
def chat_url():
    with serve_in_thread(_chat_stand_in()) as url:
        yield url


async def _seed(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
    for name, role in USERS.items():
        await add_user(users=users, username=name, password=PASSWORD, roles=[role])
    await redis.aclose()


@pytest.fixture
def settings(redis_url, unique, chat_url) -> Settings:
    asyncio.run(_seed(redis_url, unique))
    return Settings(redis_url=redis_url, redis_prefix=unique, chat_url=chat_url, analytics_url=chat_url, retrieval_url=chat_url)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as client:
        yield client


def _token(client, username="ann") -> str:
    response = client.post("/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return response.json()["token"]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _assert_refused(response, status=401, error="unauthorized") -> None:
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error", "message"} and response.json()["error"] == error
    assert "Traceback" not in response.text and "Exception" not in response.text
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


def _tampered(token: str, at: int) -> str:
    return token[:at] + ("A" if token[at] != "A" else "B") + token[at + 1 :]


def test_an_expired_token_is_401(client, redis_url, settings):
    token = _token(client)
    asyncio.run(_expire(redis_url, f"{settings.redis_prefix}:session:{hashlib.sha256(token.encode()).hexdigest()}"))
    _assert_refused(client.get("/auth/me", headers=_bearer(token)))


async def _expire(redis_url: str, key: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    await redis.pexpire(key, 1)
    await asyncio.sleep(0.05)
    await redis.aclose()


def test_a_logged_out_token_is_401(client):
    token = _token(client)
    assert client.post("/auth/logout", headers=_bearer(token)).status_code == 204
    for method, path in (("GET", "/auth/me"), ("POST", "/api/chat"), ("POST", "/auth/logout"), ("GET", "/auth/sessions")):
        _assert_refused(client.request(method, path, headers=_bearer(token)))


def test_the_token_of_a_deleted_session_is_401(client):
    doomed, keeper = _token(client), _token(client)
    sessions = client.get("/auth/sessions", headers=_bearer(keeper)).json()["sessions"]
    doomed_id = next(s["id"] for s in sessions if not s["current"])
    assert client.delete(f"/auth/sessions/{doomed_id}", headers=_bearer(keeper)).status_code == 204
    _assert_refused(client.get("/auth/me", headers=_bearer(doomed)))
    assert client.get("/auth/me", headers=_bearer(keeper)).status_code == 200


def test_a_token_with_one_character_changed_is_401(client):
    token = _token(client)
    for at in (0, len(token) // 2, len(token) - 1):
        _assert_refused(client.get("/auth/me", headers=_bearer(_tampered(token, at))))
    assert client.get("/auth/me", headers=_bearer(token)).status_code == 200


@pytest.mark.parametrize("scheme", ["", "Token ", "Basic ", "Bearer: ", "Bearer"])
def test_a_token_without_the_bearer_prefix_is_401(client, scheme):
    token = _token(client)
    _assert_refused(client.get("/auth/me", headers={"Authorization": f"{scheme}{token}"}))


def test_a_disabled_user_is_out_at_once_and_cannot_log_in(client, settings, monkeypatch, capsys):
    tokens = [_token(client), _token(client)]
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("REDIS_PREFIX", settings.redis_prefix)
    assert cli.main(["user", "disable", "ann"]) == 0
    assert "2 sessions ended" in capsys.readouterr().out
    for token in tokens:
        _assert_refused(client.get("/auth/me", headers=_bearer(token)))
    refused = client.post("/auth/login", json={"username": "ann", "password": PASSWORD})
    _assert_refused(refused)
    assert refused.json()["message"] == "invalid username or password"  # the same words as a wrong password

    assert cli.main(["user", "enable", "ann"]) == 0
    assert client.get("/auth/me", headers=_bearer(_token(client))).status_code == 200


def test_a_known_user_without_the_role_is_403_and_an_unknown_caller_401(client):
    tokens = {name: _token(client, name) for name in USERS}
    routes = {("get", "/api/analytics/summary"): "analyst", ("get", "/api/documents"): "admin",
              ("delete", "/api/documents/d1"): "admin", ("post", "/api/chat"): "user"}
    for (method, path), needed in routes.items():
        for name, role in USERS.items():
            response = getattr(client, method)(path, headers=_bearer(tokens[name]))
            allowed = list(USERS.values()).index(role) >= list(USERS.values()).index(needed)
            if allowed:
                assert response.status_code not in (401, 403), (path, name, response.text)
            else:
                _assert_refused(response, 403, "forbidden")
        for headers in ({}, _bearer("not-a-token"), _bearer(_tampered(tokens["ada"], 5))):
            _assert_refused(getattr(client, method)(path, headers=headers))


def test_no_log_line_carries_a_token_or_password(settings, caplog):
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(create_app(settings)) as gateway:
        with httpx.Client(base_url=gateway, timeout=10) as http:
            login = http.post("/auth/login", json={"username": "ann", "password": PASSWORD})
            token = login.json()["token"]
            assert http.post("/api/chat", json={"query": "q"}, headers=_bearer(token)).status_code == 200
            assert http.get("/auth/sessions", headers=_bearer(token)).status_code == 200
            assert http.get("/auth/me", headers=_bearer(_tampered(token, 3))).status_code == 401
            assert http.post("/auth/logout", headers=_bearer(token)).status_code == 204
            assert http.post("/api/chat", json={"query": "q"}, headers=_bearer(token)).status_code == 401
            assert http.post("/auth/login", json={"username": "ann", "password": PASSWORD + "x"}).status_code == 401
    records = caplog.records
    logins = [(r.status, r.user_id) for r in records if getattr(r, "route", None) == "/auth/login"]
    assert logins == [(200, login.json()["user"]["id"]), (401, None)]  # who logged in; a failed login names no one
    secrets = (token, _tampered(token, 3), hashlib.sha256(token.encode()).hexdigest(), PASSWORD)
    for record in records:
        everything = f"{record.getMessage()} {record.__dict__!r}"
        assert not any(secret in everything for secret in secrets), record.__dict__
    assert not any(secret in caplog.text for secret in secrets)
