"""Body limits, CORS and security headers of the whole gateway, over real HTTP where framing matters."""
import socket

import httpx
import pytest
from fastapi.testclient import TestClient

from services.gateway.main import create_app
from services.gateway.settings import Settings
from tests.integration.gateway.chat_stand_in import chat_stand_in, gateway_settings, login
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration
ORIGIN = "https://app.example.com"


@pytest.fixture(scope="module")
def chat_url():
    with serve_in_thread(chat_stand_in()) as url:
        yield url


@pytest.fixture
def settings(redis_url, unique, chat_url) -> Settings:
    return gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=chat_url, max_body_bytes=2048, max_upload_bytes=8192,
        cors_origins=(ORIGIN,),
    )


@pytest.fixture
def gateway(settings):
    with serve_in_thread(create_app(settings)) as url:
        yield url


def _chunks(total: int, size: int = 512):
    for start in range(0, total, size):
        yield b" " * min(size, total - start)


def _assert_413(response: httpx.Response) -> None:
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "payload_too_large"


def test_an_oversized_body_is_413_by_content_length_and_while_chunked(gateway):
    with httpx.Client(base_url=gateway) as client:
        auth = login(client)
        _assert_413(client.post("/api/chat", content=b" " * 2049, headers={**auth, "Content-Type": "application/json"}))
        _assert_413(client.post("/auth/login", content=b" " * 4000, headers={"Content-Type": "application/json"}))
        # Before the caller is checked (docs/users-and-roles.md): the gateway reads no more of it to say 401.
        _assert_413(client.post("/api/chat", content=b" " * 2049, headers={"Content-Type": "application/json"}))
        chunked = client.post("/api/chat", content=_chunks(4000), headers={**auth, "Content-Type": "application/json"})
        assert "content-length" not in chunked.request.headers
        _assert_413(chunked)
        _assert_413(client.post("/auth/login", content=_chunks(4000), headers={"Content-Type": "application/json"}))
        ok = client.post("/api/chat", json={"query": "q" + " " * 1500}, headers=auth)
        assert ok.status_code == 200, ok.text


def test_a_huge_declared_body_is_refused_before_it_is_sent(gateway):
    host, port = gateway.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(
            b"POST /auth/login HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 10000000\r\n\r\n"
        )
        reply = conn.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413") and "payload_too_large" in reply


def test_uploads_to_documents_have_their_own_larger_limit(gateway):
    with httpx.Client(base_url=gateway) as client:
        admin = login(client, "ada")
        files = {"file": ("notes.md", b"# Notes\n" + b"x" * 5000, "text/markdown")}
        response = client.post("/api/documents", files=files, headers=admin)
        # Past the gateway's limit: the retrieval service is not running here, so it is 503 naming it.
        assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"
        files = {"file": ("notes.md", b"x" * 9000, "text/markdown")}
        _assert_413(client.post("/api/documents", files=files, headers=admin))


def test_cors_preflight_for_an_allowed_and_a_refused_origin(settings):
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    with TestClient(create_app(settings)) as client:
        allowed = client.options("/api/chat", headers={"Origin": ORIGIN, **preflight})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in allowed.headers
        # "Every response of the gateway" (docs/configuration.md): CORSMiddleware answers a preflight itself.
        security = (allowed.headers["x-content-type-options"], allowed.headers["referrer-policy"])
        assert security == ("nosniff", "no-referrer")

        refused = client.options("/api/chat", headers={"Origin": "https://evil.example", **preflight})
        assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers

        answer = client.post("/auth/login", json={"username": "ann", "password": "nope"}, headers={"Origin": ORIGIN})
        assert answer.status_code == 401 and answer.headers["access-control-allow-origin"] == ORIGIN
        assert "x-request-id" in answer.headers["access-control-expose-headers"].lower()


# What the official OpenAI JavaScript client (openai-node) adds to every request, and to a stream() helper's.
OPENAI_JS_HEADERS = (
    "authorization,content-type,x-stainless-arch,x-stainless-helper-method,x-stainless-lang,x-stainless-os,"
    "x-stainless-package-version,x-stainless-retry-count,x-stainless-runtime,x-stainless-runtime-version,"
    "x-stainless-timeout"
)


def test_a_page_of_an_allowed_origin_may_use_the_official_openai_javascript_client(settings):
    preflight = {
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": OPENAI_JS_HEADERS
    }
    with TestClient(create_app(settings)) as client:
        allowed = client.options("/v1/chat/completions", headers=preflight)
        assert allowed.status_code == 200, allowed.text
        assert allowed.headers["access-control-allow-origin"] == ORIGIN

        # The client obeys x-should-retry (no retry of a 409 request_id_taken, say) only if the page may read it.
        answer = client.get("/v1/models", headers={"Origin": ORIGIN})
        exposed = answer.headers["access-control-expose-headers"].lower()
        assert answer.status_code == 401 and "x-should-retry" in exposed and "retry-after" in exposed


def test_no_cors_headers_without_origins(redis_url, unique):
    with TestClient(create_app(Settings(redis_url=redis_url, redis_prefix=unique))) as client:
        response = client.options(
            "/api/chat", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in response.headers
        assert "access-control-allow-origin" not in client.get("/healthz", headers={"Origin": ORIGIN}).headers


def test_a_wildcard_origin_with_credentials_is_refused_at_start_up(monkeypatch):
    monkeypatch.setenv("CORS_ORIGINS", "https://a.example, *")
    monkeypatch.setenv("CORS_ALLOW_CREDENTIALS", "true")
    with pytest.raises(ValueError, match="CORS_ORIGINS"):
        Settings()


def test_the_web_page_is_served_with_security_headers(settings):
    with TestClient(create_app(settings)) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        csp = page.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "style-src 'self';" in csp and "frame-ancestors 'none'" in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["x-frame-options"] == "DENY"
        assert "<script>" not in page.text and " style=" not in page.text  # nothing inline that the policy blocks
        api = client.get("/healthz")
        assert api.headers["x-content-type-options"] == "nosniff" and "content-security-policy" not in api.headers
        assert page.headers["cache-control"] == "no-cache"  # the page's own: kept, checked again on each use
        login = client.post("/auth/login", json={"username": "nobody", "password": "wrong password"})
        assert login.status_code == 401 and login.headers["cache-control"] == "no-store"
