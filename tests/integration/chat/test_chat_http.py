"""Chat over real HTTP against a stand-in retrieval service, and against a retrieval that is down or hangs."""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import httpx
import pytest

from services.chat.main import create_app
from services.chat.settings import Settings
from tests.integration.chat.stand_ins import HEADERS, TOKEN, fake_retrieval_app
from tests.support import free_port, serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def retrieval():
    app, calls = fake_retrieval_app()
    with serve_in_thread(app) as url:
        yield url, calls


@asynccontextmanager
async def chat_client(**overrides):
    settings = Settings(service_token=TOKEN, **overrides)
    app = create_app(settings, publisher=ListPublisher())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat") as client:
            yield client


async def test_chat_calls_retrieval_over_http_with_identity_and_token(retrieval):
    url, calls = retrieval
    async with chat_client(retrieval_url=url) as client:
        response = await client.post(
            "/chat", json={"query": "How do I add a user?", "top_k": 2, "filters": {"category": "guide"}},
            headers={**HEADERS, "X-Request-ID": "rid-123"},
        )
        ready = await client.get("/readyz")
    assert response.status_code == 200, response.text
    body = response.json()
    assert "cairn user add" in body["answer"] and body["citations"][0]["doc_id"] == "users.md"
    assert body["citations"][0]["url"] == "docs/users.md"
    assert body["metadata"]["chunks_retrieved"] == 2 and body["metadata"]["chunks_used"] == 1
    sent = calls[-1]
    assert sent["body"] == {"query": "How do I add a user?", "top_k": 2, "filters": {"category": "guide"}}
    assert sent["headers"]["x-service-token"] == TOKEN
    assert (sent["headers"]["x-user-id"], sent["headers"]["x-user-roles"], sent["headers"]["x-session-id"]) == (
        "u1", "user", "s1"
    )
    assert sent["headers"]["x-request-id"] == "rid-123" and sent["headers"]["traceparent"].startswith("00-")
    assert ready.json()["checks"] == {
        "retrieval": True, "retrieval_service_token": True, "llm": True, "conversation_store": True
    }


async def test_retrieval_down_is_503_at_once():
    async with chat_client(retrieval_url=f"http://127.0.0.1:{free_port()}", retrieval_timeout_s=30) as client:
        started = time.monotonic()
        response = await client.post("/chat", json={"query": "add a user"}, headers=HEADERS)
        elapsed = time.monotonic() - started
        ready = await client.get("/readyz")
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"
    assert elapsed < 5, elapsed  # a refused connection: not the 30 s timeout, with slack for a slow, busy machine
    assert ready.status_code == 200 and ready.json()["checks"]["retrieval"] is False  # reported, not needed


async def test_retrieval_that_hangs_is_503_within_the_timeout():
    connections: list[asyncio.StreamWriter] = []

    async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.read(-1)

    server = await asyncio.start_server(never_answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with chat_client(retrieval_url=f"http://127.0.0.1:{port}", retrieval_timeout_s=0.5) as client:
            started = time.monotonic()
            response = await client.post("/chat", json={"query": "add a user"}, headers=HEADERS)
            elapsed = time.monotonic() - started
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"
    assert 0.4 < elapsed < 2.5


async def test_retrieval_server_error_is_503():
    app, _ = fake_retrieval_app(status=500)
    with serve_in_thread(app) as url:
        async with chat_client(retrieval_url=url) as client:
            response = await client.post("/chat", json={"query": "add a user"}, headers=HEADERS)
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"
