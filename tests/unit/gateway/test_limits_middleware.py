"""The body limit, security headers and CORS set-up, on a small app of their own."""
import pytest
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from pydantic import BaseModel
from starlette.middleware import Middleware

from services.gateway.middleware import (
    DOCS_CSP,
    PAGE_CSP,
    BodyLimit,
    BodyLimitMiddleware,
    SecurityHeadersMiddleware,
    cors_middleware,
)
from shared.web import create_service_app

pytestmark = pytest.mark.unit


class Note(BaseModel):
    text: str


def _app() -> FastAPI:
    app = create_service_app(
        service="test",
        title="test",
        middleware=[
            Middleware(SecurityHeadersMiddleware),
            Middleware(
                BodyLimitMiddleware,
                default=BodyLimit(100, "MAX_BODY_BYTES"),
                per_path={"/upload": BodyLimit(1000, "MAX_UPLOAD_BYTES")},
            ),
        ],
    )

    @app.post("/raw")
    async def raw(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    @app.post("/upload")
    async def upload(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    @app.post("/model")
    async def model(note: Note) -> dict:
        return {"text": note.text}

    @app.post("/ignores-body")
    async def ignores_body() -> dict:
        return {"ok": True}

    @app.get("/page")
    async def page() -> HTMLResponse:
        return HTMLResponse("<!doctype html><p>hi</p>")

    @app.get("/own-policy")
    async def own_policy() -> HTMLResponse:
        return HTMLResponse("<p>x</p>", headers={"Content-Security-Policy": "default-src 'none'"})

    app.include_router(_included_routers())
    return app


def _included_routers() -> APIRouter:
    """Routes of routers included in the app, as the gateway's are, one of them two routers deep."""
    outer, inner = APIRouter(prefix="/included"), APIRouter(prefix="/inner")

    @outer.post("/notes/{note_id}")
    async def included(note_id: str, note: Note) -> dict:
        return {"id": note_id}

    @inner.post("/raw")
    async def nested(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    outer.include_router(inner)
    return outer


@pytest.fixture(scope="module")
def client():
    with TestClient(_app()) as client:
        yield client


def _chunks(total: int, size: int = 30):
    for start in range(0, total, size):
        yield b"x" * min(size, total - start)


def _assert_413(response):
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "payload_too_large"
    # The limit and the variable that sets it, so whoever reads the 413 knows what an operator would raise.
    assert response.json()["message"] in (
        "the request body is over the limit of 100 bytes (MAX_BODY_BYTES)",
        "the request body is over the limit of 1000 bytes (MAX_UPLOAD_BYTES)",
    )
    assert response.headers["x-request-id"]  # inside the request context: logged and traceable like any answer


@pytest.mark.parametrize("path", ["/raw", "/model", "/ignores-body"])
def test_a_declared_length_over_the_limit_is_413_before_reading(client, path):
    _assert_413(client.post(path, content=b"x" * 101, headers={"Content-Type": "application/json"}))


@pytest.mark.parametrize("path", ["/raw", "/model"])
def test_a_chunked_body_is_stopped_once_past_the_limit(client, path):
    response = client.post(path, content=_chunks(500), headers={"Content-Type": "application/json"})
    assert "content-length" not in response.request.headers
    _assert_413(response)


def test_bodies_within_the_limit_pass(client):
    assert client.post("/raw", content=b"x" * 100).json() == {"bytes": 100}
    assert client.post("/raw", content=_chunks(100)).json() == {"bytes": 100}
    assert client.post("/model", json={"text": "hello"}).json() == {"text": "hello"}


def test_a_path_of_its_own_has_its_own_limit(client):
    assert client.post("/upload", content=_chunks(1000)).json() == {"bytes": 1000}
    _assert_413(client.post("/upload", content=_chunks(1001)))
    _assert_413(client.post("/upload", content=b"x" * 1001))


def test_a_limit_of_zero_refuses_every_request_with_a_body():
    """docs/configuration.md: MAX_BODY_BYTES=0 refuses every request that has a body, and only those."""
    app = create_service_app(
        service="test", title="test", middleware=[Middleware(BodyLimitMiddleware, default=BodyLimit(0, "MAX_BODY_BYTES"))]
    )

    @app.post("/raw")
    async def raw(request: Request) -> dict:
        return {"bytes": len(await request.body())}

    @app.get("/page")
    async def page() -> dict:
        return {"ok": True}

    with TestClient(app) as zero:
        for response in (zero.post("/raw", content=b"x"), zero.post("/raw", content=_chunks(1))):
            assert response.status_code == 413 and "limit of 0 bytes (MAX_BODY_BYTES)" in response.json()["message"]
        assert zero.post("/raw").json() == {"bytes": 0}
        assert zero.get("/page").json() == {"ok": True}


def test_limits_must_not_be_negative():
    with pytest.raises(ValueError):
        BodyLimitMiddleware(FastAPI(), default=BodyLimit(-1, "MAX_BODY_BYTES"))


def test_html_gets_the_page_policy_and_every_answer_nosniff(client):
    page = client.get("/page")
    assert page.headers["content-security-policy"] == PAGE_CSP
    assert "script-src 'self';" in PAGE_CSP and "unsafe-inline" not in PAGE_CSP
    assert "frame-ancestors 'none'" in PAGE_CSP
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["referrer-policy"] == "no-referrer"

    api = client.get("/healthz")
    assert api.headers["x-content-type-options"] == "nosniff" and api.headers["referrer-policy"] == "no-referrer"
    assert "content-security-policy" not in api.headers and "x-frame-options" not in api.headers
    assert api.headers["cache-control"] == "no-store"  # an answer may hold a token or someone's questions


def test_a_policy_the_route_sets_is_kept(client):
    response = client.get("/own-policy")
    assert response.headers.get_list("content-security-policy") == ["default-src 'none'"]


def test_the_openapi_pages_get_a_policy_that_lets_them_run(client):
    docs = client.get("/docs")
    assert docs.headers["content-security-policy"] == DOCS_CSP
    assert "frame-ancestors 'none'" in DOCS_CSP


def test_cors_is_off_without_origins_and_refuses_a_wildcard_with_credentials():
    assert cors_middleware(origins=(), allow_credentials=True) == []
    assert len(cors_middleware(origins=("*",), allow_credentials=False)) == 1
    with pytest.raises(ValueError, match="CORS_ORIGINS"):
        cors_middleware(origins=("https://a.example", "*"), allow_credentials=True)


def _requests_counted(route: str, status: str) -> float:
    labels = {"service": "test", "method": "POST", "route": route, "status": status}
    return REGISTRY.get_sample_value("cairn_http_requests_total", labels) or 0.0


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/raw", "/raw"),
        ("/model", "/model"),
        ("/included/notes/n-1", "/included/notes/{note_id}"),
        ("/included/inner/raw", "/included/inner/raw"),
    ],
)
def test_a_413_before_routing_is_counted_under_its_route(client, path, route):
    """Refused by its Content-Length before the router ran, it still counts under the route it was sent to,
    an included router's route too."""
    before, unmatched_before = _requests_counted(route, "413"), _requests_counted("unmatched", "413")
    _assert_413(client.post(path, content=b"x" * 101, headers={"Content-Type": "application/json"}))
    assert _requests_counted(route, "413") - before == 1
    assert _requests_counted("unmatched", "413") == unmatched_before


def test_a_413_to_no_route_is_counted_as_unmatched(client):
    before = _requests_counted("unmatched", "413")
    _assert_413(client.post("/nowhere", content=b"x" * 101))
    assert _requests_counted("unmatched", "413") - before == 1
