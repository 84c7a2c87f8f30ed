"""The gateway against the real Redis, and a real HTTP upstream standing in for chat."""
import asyncio
import hashlib
import json
import threading

import httpx

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.testclient import TestClient
from redis import Redis

from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import add_user
from shared.settings import CommonSettings
from shared.web import create_service_app, service_token_guard
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery"


RELEASE_STREAM = threading.Event()  # the stand-in's stream holds its second event until a test sets this


def _echo_upstream() -> FastAPI:
    app = FastAPI()

    @app.post("/chat/stream")
    async def chat_stream(request: Request) -> StreamingResponse:
        async def events():
            yield f"event: sources\ndata: {json.dumps({'user': request.headers.get('x-user-id')})}\n\n"
            while not RELEASE_STREAM.is_set():
                await asyncio.sleep(0.02)
            yield "event: done\ndata: {}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/chat")
    async def chat(request: Request) -> dict:
        return {"headers": dict(request.headers), "body": (await request.json())}

    return app


@pytest.fixture(scope="module")
def upstream_url():
    with serve_in_thread(_echo_upstream()) as url:
        yield url


@pytest.fixture
def settings(redis_url, unique, upstream_url) -> Settings:
    asyncio.run(_seed_users(redis_url, unique))
    return Settings(redis_url=redis_url, redis_prefix=unique, session_ttl_seconds=600, chat_url=upstream_url)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as client:
        yield client


def _login(client, username="ann") -> dict:
    response = client.post("/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return response.json()


def test_login_me_logout(client, settings, redis_url):
    body = _login(client)
    token = body["token"]
    assert body["user"]["username"] == "ann" and body["user"]["roles"] == ["user"]
    auth = {"Authorization": f"Bearer {token}"}
    assert client.get("/auth/me", headers=auth).json()["user"]["username"] == "ann"

    redis = Redis.from_url(redis_url, decode_responses=True)
    keys = redis.keys(f"{settings.redis_prefix}:session:*")
    assert keys == [f"{settings.redis_prefix}:session:{hashlib.sha256(token.encode()).hexdigest()}"]
    assert all(token not in str(redis.hgetall(k)) for k in keys)
    assert 590 <= redis.ttl(keys[0]) <= 600

    redis.expire(keys[0], 30)  # activity slides the expiry back to the full TTL
    client.get("/auth/me", headers=auth)
    assert redis.ttl(keys[0]) > 590

    assert client.post("/auth/logout", headers=auth).status_code == 204
    response = client.get("/auth/me", headers=auth)
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    assert redis.keys(f"{settings.redis_prefix}:session:*") == []


@pytest.mark.parametrize("header", [None, "Bearer nonsense", "Basic YW5uOnB3", "Bearer "])
def test_missing_or_bad_token_is_401(client, header):
    headers = {"Authorization": header} if header else {}
    for method, path in (("get", "/auth/me"), ("post", "/api/chat"), ("get", "/api/analytics/summary")):
        response = getattr(client, method)(path, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


def test_wrong_password_and_bad_bodies(client):
    response = client.post("/auth/login", json={"username": "ann", "password": "nope"})
    assert response.status_code == 401 and response.json()["message"] == "invalid username or password"
    response = client.post("/auth/login", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"
    response = client.post("/auth/login", json={"username": "ann"})
    assert response.status_code == 422 and "password" in response.json()["message"]


def test_chat_is_forwarded_with_identity_service_token_and_request_id(client, settings):
    login = _login(client)
    response = client.post(
        "/api/chat",
        json={"query": "hello?"},
        headers={"Authorization": f"Bearer {login['token']}", "X-Request-ID": "req-123"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == "req-123"
    seen = response.json()
    assert seen["body"] == {"query": "hello?"}
    assert seen["headers"]["x-service-token"] == settings.service_token.get_secret_value()
    assert seen["headers"]["x-user-id"] == login["user"]["id"]
    assert seen["headers"]["x-user-roles"] == "user"
    assert seen["headers"]["x-request-id"] == "req-123"
    assert seen["headers"]["traceparent"].startswith("00-")
    assert login["token"] not in str(seen["headers"])


def test_the_chat_stream_is_passed_through_unbuffered(settings):
    RELEASE_STREAM.clear()
    with serve_in_thread(create_app(settings)) as gateway:
        login = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}).json()
        auth = {"Authorization": f"Bearer {login['token']}"}
        with httpx.stream("POST", f"{gateway}/api/chat/stream", json={"query": "q"}, headers=auth, timeout=10) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            assert next(lines) == "event: sources"  # arrives while chat still holds the rest of its answer
            assert json.loads(next(lines).removeprefix("data: ")) == {"user": login["user"]["id"]}
            RELEASE_STREAM.set()
            assert "event: done" in list(lines)


def test_the_schema_names_the_content_type_the_chat_stream_answers_with(settings):
    RELEASE_STREAM.set()
    app = create_app(settings)
    success = app.openapi()["paths"]["/api/chat/stream"]["post"]["responses"]["200"]
    with serve_in_thread(app) as gateway:
        login = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}).json()
        auth = {"Authorization": f"Bearer {login['token']}"}
        response = httpx.post(f"{gateway}/api/chat/stream", json={"query": "q"}, headers=auth, timeout=10)
    assert response.status_code == 200
    assert list(success["content"]) == [response.headers["content-type"].split(";")[0]] == ["text/event-stream"]


def test_a_stream_that_goes_silent_ends_with_an_error_event(settings):
    RELEASE_STREAM.clear()
    try:
        with serve_in_thread(create_app(settings.model_copy(update={"upstream_timeout_s": 0.5}))) as gateway:
            login = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}).json()
            auth = {"Authorization": f"Bearer {login['token']}"}
            response = httpx.post(f"{gateway}/api/chat/stream", json={"query": "q"}, headers=auth, timeout=10)
    finally:
        RELEASE_STREAM.set()
    assert response.status_code == 200
    last = response.text.strip().split("\n\n")[-1].splitlines()
    assert last[0] == "event: error"
    assert json.loads(last[1].removeprefix("data: ")) == {
        "error": "chat_timeout", "message": "chat did not answer in time", "status": 504
    }


def _chat_stopping_mid_event() -> FastAPI:
    """A chat whose stream stops half way through its `token` event, as a chat killed while the rest of a
    long event still waited in its send buffer for a slow reader."""
    app = FastAPI()

    @app.post("/chat/stream")
    async def chat_stream() -> StreamingResponse:
        async def events():
            yield 'event: sources\ndata: {"sources": []}\n\nevent: token\ndata: {"text": "the first half'
            await asyncio.sleep(5)

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def test_an_event_chat_left_half_sent_reaches_no_client(settings):
    with serve_in_thread(_chat_stopping_mid_event()) as chat:
        stopping = settings.model_copy(update={"chat_urls": [chat], "upstream_timeout_s": 0.5})
        with serve_in_thread(create_app(stopping)) as gateway:
            login = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}).json()
            auth = {"Authorization": f"Bearer {login['token']}"}
            response = httpx.post(f"{gateway}/api/chat/stream", json={"query": "q"}, headers=auth, timeout=10)
    events = [block.splitlines() for block in response.text.split("\n\n") if block.strip()]
    assert [lines[0] for lines in events] == ["event: sources", "event: error"]  # no token cut short
    assert json.loads(events[-1][1].removeprefix("data: "))["error"] == "chat_timeout"


def test_roles_are_enforced_per_route(client):
    user = {"Authorization": f"Bearer {_login(client, 'ann')['token']}"}
    response = client.get("/api/analytics/summary", headers=user)
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert client.get("/api/documents", headers=user).status_code == 403


def test_upstream_down_is_503_naming_it(redis_url, unique):
    settings = Settings(redis_url=redis_url, redis_prefix=unique, chat_url=f"http://127.0.0.1:{free_port()}")
    asyncio.run(_seed_users(redis_url, unique))
    with TestClient(create_app(settings)) as client:
        token = _login(client)["token"]
        response = client.post("/api/chat", json={"query": "hi"}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 503 and response.json()["error"] == "chat_unavailable"


_INTERNALS = (
    'Traceback (most recent call last):\n  File "/srv/cairn/services/chat/api.py", line 1\n'
    "ConnectionError: http://10.1.2.3:6379 cairn:session:abc SELECT * FROM events"
)


def _misbehaving_upstream() -> FastAPI:
    """A chat whose answer the query picks: an error page in front of it (a proxy's), or hop-by-hop headers."""
    app = FastAPI()
    pages = {
        "html-502": HTMLResponse("<html><body><h1>502 Bad Gateway</h1></body></html>", status_code=502),
        "text-500": PlainTextResponse("Internal Server Error", status_code=500),
        "html-504": HTMLResponse("<html><body>504 Gateway Time-out</body></html>", status_code=504),
        "json-500": JSONResponse({"error": "internal_error", "message": "chat's own"}, status_code=500),
        # Errors not in Cairn's shape, such as a framework's default or a proxy's page, carrying internals.
        "detail-500": JSONResponse({"detail": _INTERNALS}, status_code=500),
        "text-400": PlainTextResponse(_INTERNALS, status_code=400),
        "html-404": HTMLResponse(f"<html><body>404 Not Found: {_INTERNALS}</body></html>", status_code=404),
        "json-list-422": JSONResponse([{"loc": ["body"], "msg": _INTERNALS}], status_code=422),
        "hop-by-hop": JSONResponse(
            {"answer": "a"},
            headers={"Upgrade": "h2c", "Trailer": "X-Checksum", "Proxy-Authenticate": "Basic", "X-Cairn-Hop": "1",
                     "Connection": "X-Cairn-Hop", "X-Kept": "yes"},
        ),
    }

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/chat")
    @app.post("/chat/stream")
    async def chat(request: Request):
        return pages[(await request.json())["query"]]

    return app


@pytest.fixture(scope="module")
def misbehaving_url():
    with serve_in_thread(_misbehaving_upstream()) as url:
        yield url


def _asked_of(chat_url, redis_url, unique, *, path, query):
    """A user's question sent through a gateway whose chat is at `chat_url`: the gateway's response."""
    asyncio.run(_seed_users(redis_url, unique))
    settings = Settings(redis_url=redis_url, redis_prefix=unique, chat_url=chat_url)
    with TestClient(create_app(settings)) as client:
        auth = {"Authorization": f"Bearer {_login(client)['token']}"}
        return client.post(path, json={"query": query}, headers=auth)


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat/stream"])
@pytest.mark.parametrize(
    ("page", "status", "error"),
    [("html-502", 503, "chat_unavailable"), ("text-500", 503, "chat_unavailable"), ("html-504", 504, "chat_timeout"),
     ("json-500", 500, "internal_error")],
)
def test_an_error_page_that_is_not_json_becomes_an_error_naming_the_service(
    redis_url, unique, misbehaving_url, path, page, status, error
):
    response = _asked_of(misbehaving_url, redis_url, unique, path=path, query=page)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"] == error  # chat's own JSON error is passed on as it came


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat/stream"])
@pytest.mark.parametrize(
    ("page", "status", "error", "message"),
    [("detail-500", 503, "chat_unavailable", "chat is unavailable: it answered 500"),
     ("text-400", 400, "bad_request", "chat answered 400"),
     ("html-404", 404, "not_found", "chat answered 404"),
     ("json-list-422", 422, "invalid_request", "chat answered 422")],
)
def test_an_error_not_in_cairns_shape_keeps_its_status_but_none_of_its_body(
    redis_url, unique, misbehaving_url, path, page, status, error, message
):
    response = _asked_of(misbehaving_url, redis_url, unique, path=path, query=page)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": error, "message": message}
    for internal in ("Traceback", "/srv/", "10.1.2.3", "cairn:session", "SELECT"):
        assert internal not in response.text


def test_hop_by_hop_headers_of_the_service_are_not_passed_on(redis_url, unique, misbehaving_url):
    asyncio.run(_seed_users(redis_url, unique))
    settings = Settings(redis_url=redis_url, redis_prefix=unique, chat_url=misbehaving_url)
    with serve_in_thread(create_app(settings)) as gateway:
        token = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}).json()["token"]
        response = httpx.post(
            f"{gateway}/api/chat", json={"query": "hop-by-hop"}, headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200 and response.json() == {"answer": "a"}
    assert response.headers["x-kept"] == "yes"
    for hop in ("upgrade", "trailer", "proxy-authenticate", "x-cairn-hop"):
        assert hop not in response.headers, hop


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat/stream"])
def test_a_service_refusing_the_gateways_service_token_is_503_not_the_users_401(redis_url, unique, path):
    other_token = CommonSettings(service_token="a-service-token-the-gateway-does-not-have")
    chat = create_service_app(service="chat", title="chat with another service token")
    guard = [Depends(service_token_guard(other_token))]

    @chat.post("/chat", dependencies=guard)
    @chat.post("/chat/stream", dependencies=guard)
    async def answer() -> dict:
        return {"answer": "never"}

    asyncio.run(_seed_users(redis_url, unique))
    with serve_in_thread(chat) as chat_url:
        settings = Settings(redis_url=redis_url, redis_prefix=unique, chat_url=chat_url)
        with TestClient(create_app(settings)) as client:
            auth = {"Authorization": f"Bearer {_login(client)['token']}"}
            response = client.post(path, json={"query": "q"}, headers=auth)
            me = client.get("/auth/me", headers=auth)
    assert response.status_code == 503
    assert response.json() == {"error": "chat_unavailable", "message": "chat refused the gateway's service token"}
    assert "www-authenticate" not in response.headers
    assert me.status_code == 200  # the user's session is fine: the web page must not sign the user out


def test_redis_down_fails_closed_with_503(unique):
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_prefix=unique, redis_timeout_s=1)
    with TestClient(create_app(settings)) as client:
        login = client.post("/auth/login", json={"username": "ann", "password": PASSWORD})
        me = client.get("/auth/me", headers={"Authorization": "Bearer anything"})
        ready = client.get("/readyz")
    for response in (login, me):
        assert response.status_code == 503
        assert response.json()["error"] == "session_store_unavailable"
    assert ready.status_code == 503 and ready.json()["checks"]["redis"] is False


def test_the_health_checks_answer_head_as_they_answer_get_and_a_503_says_when_to_retry(settings, unique):
    """Uptime checks and `curl -I` ask with HEAD: the status of GET, without the body, never 405."""
    redis_down = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_prefix=unique, redis_timeout_s=1)
    for app_settings, ready in ((settings, 200), (redis_down, 503)):
        with serve_in_thread(create_app(app_settings)) as gateway, httpx.Client(base_url=gateway, timeout=10) as http:
            for path, status in (("/healthz", 200), ("/readyz", ready)):
                response = http.head(path)
                assert response.status_code == status == http.get(path).status_code, f"HEAD {path}: {response.text}"
                assert response.content == b"" and response.headers["x-request-id"]
            if ready == 503:
                assert http.get("/readyz").headers["retry-after"] == "5", "as every 503 of Cairn's"


async def _seed_users(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
    await add_user(users=users, username="ann", password=PASSWORD, roles=["user"])
    await add_user(users=users, username="ada", password=PASSWORD, roles=["admin"])
    await redis.aclose()
