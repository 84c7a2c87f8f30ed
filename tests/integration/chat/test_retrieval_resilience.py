"""The retrieval client against a real HTTP server that fails on demand: retries, timeout, circuit breaker."""
from __future__ import annotations

import asyncio
import time

import aiohttp
import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from services.chat.adapters.circuit_breaker import CLOSED, OPEN, CircuitBreaker
from services.chat.adapters.retrieval_client import HttpRetrievalClient
from services.chat.main import create_app
from services.chat.settings import Settings
from tests.integration.chat.stand_ins import HEADERS, TOKEN
from tests.unit.chat.fakes import ListPublisher
from shared.caller import Caller
from shared.replicas import ReplicaPool
from shared.errors import BadRequest, DependencyUnavailable
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration

RESULT = {"chunk_id": "c1", "doc_id": "d1", "content": "text", "score": 0.5, "metadata": {}}


def scripted_retrieval() -> tuple[FastAPI, dict]:
    """Answers per script["mode"]: "ok", "fail" (500 script["failures"] times, then 200), "reject" (422), "hang"."""
    script = {"mode": "ok", "failures": 0, "calls": 0}
    app = FastAPI()

    @app.post("/search")
    async def search():
        script["calls"] += 1
        if script["mode"] == "hang":
            await asyncio.sleep(2)  # longer than the client's timeout, short enough for a quick server shutdown
        if script["mode"] == "reject":
            return JSONResponse({"message": "bad filter"}, status_code=422)
        if script["mode"] == "fail" and script["failures"] > 0:
            script["failures"] -= 1
            return JSONResponse({"message": "boom"}, status_code=500)
        return {"results": [RESULT]}

    return app, script


@pytest.fixture(scope="module")
def server():
    app, script = scripted_retrieval()
    with serve_in_thread(app) as url:
        yield url, script


async def search_with(url: str, *, timeout_s: float = 3.0, attempts: int = 3, breaker: CircuitBreaker | None = None):
    async with aiohttp.ClientSession() as http:
        client = HttpRetrievalClient(
            session=http, settings=Settings(), replicas=ReplicaPool(service="retrieval", urls=[url]), timeout_s=timeout_s,
            attempts=attempts, backoff_base_s=0.05, breaker=breaker,
        )
        return await client.search(query="q", top_k=3, filters=None, caller=Caller(user_id="u1"))


def reset(script: dict, mode: str, failures: int = 0) -> None:
    script.update(mode=mode, failures=failures, calls=0)


async def test_500s_are_retried_then_succeed(server):
    url, script = server
    reset(script, "fail", failures=2)
    chunks = await search_with(url)
    assert [c.chunk_id for c in chunks] == ["c1"] and script["calls"] == 3


async def test_4xx_is_not_retried(server):
    url, script = server
    reset(script, "reject")
    with pytest.raises(BadRequest):
        await search_with(url)
    assert script["calls"] == 1


async def test_hang_gives_503_within_the_timeout(server):
    url, script = server
    reset(script, "hang")
    started = time.monotonic()
    with pytest.raises(DependencyUnavailable) as info:
        await search_with(url, timeout_s=0.5)
    assert info.value.code == "retrieval_unavailable" and time.monotonic() - started < 1.5


async def test_breaker_opens_after_failures_and_closes_after_cooldown(server):
    url, script = server
    reset(script, "fail", failures=100)
    breaker = CircuitBreaker(name="retrieval", failure_threshold=2, cooldown_s=1.5)  # long enough on a loaded machine
    for _ in range(2):
        with pytest.raises(DependencyUnavailable):
            await search_with(url, attempts=1, breaker=breaker)
    assert breaker.state == OPEN and script["calls"] == 2
    with pytest.raises(DependencyUnavailable):
        await search_with(url, attempts=1, breaker=breaker)
    assert script["calls"] == 2, "an open breaker must not reach the server"
    reset(script, "ok")
    await asyncio.sleep(1.6)
    chunks = await search_with(url, attempts=1, breaker=breaker)
    assert chunks and breaker.state == CLOSED and script["calls"] == 1


async def test_chat_answers_503_retrieval_unavailable_when_retrieval_keeps_failing(server):
    url, script = server
    reset(script, "fail", failures=100)
    settings = Settings(service_token=TOKEN, retrieval_url=url, retrieval_timeout_s=2, retrieval_backoff_s=0.05)
    app = create_app(settings, publisher=ListPublisher())
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat") as client:
            response = await client.post("/chat", json={"query": "How do I add a user?"}, headers=HEADERS)
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"
    assert script["calls"] == settings.retrieval_attempts
