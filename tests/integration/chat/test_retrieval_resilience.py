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


async def test_a_search_one_replica_leaves_unanswered_goes_to_another_replica_within_the_timeout():
    """A replica that takes the connection and never answers (hung) cost every other search its whole timeout:
    the first attempt waited for all of it, leaving the live replica no time. Now it is skipped for a while too."""
    (hung_app, hung), (live_app, live) = scripted_retrieval(), scripted_retrieval()
    reset(hung, "hang")
    with serve_in_thread(hung_app) as hung_url, serve_in_thread(live_app) as live_url:
        async with aiohttp.ClientSession() as http:
            client = HttpRetrievalClient(
                session=http, settings=Settings(), replicas=ReplicaPool(service="retrieval", urls=[hung_url, live_url]),
                timeout_s=1.5, attempts=3, backoff_base_s=0.05,
            )
            started = time.monotonic()
            caller = Caller(user_id="u1")
            found = [await client.search(query="q", top_k=3, filters=None, caller=caller) for _ in range(2)]
            elapsed = time.monotonic() - started
    assert [[chunk.chunk_id for chunk in chunks] for chunks in found] == [["c1"], ["c1"]]
    assert (hung["calls"], live["calls"]) == (1, 2), "the live replica is asked too, and the silent one then skipped"
    # The first attempt's share of the timeout (0.5 s), then the live replica, twice: under the one whole timeout
    # (1.5 s) that a first attempt waiting for all of it would cost, with slack for a slow, busy machine.
    assert elapsed < 1.5, "the live replica is asked after the first attempt's share of the timeout (0.5 s)"


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
