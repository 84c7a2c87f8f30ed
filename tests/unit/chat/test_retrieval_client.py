"""The retrieval client's retry policy and circuit breaker (httpx.MockTransport, injectable clock)."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from services.chat.adapters.circuit_breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from services.chat.adapters.retrieval_client import HttpRetrievalClient
from services.chat.settings import Settings
from shared.caller import Caller
from shared.errors import BadRequest, DependencyUnavailable

CALLER = Caller(user_id="u1", roles=["user"], session_id="s1")
RESULT = {"chunk_id": "c1", "doc_id": "d1", "content": "text", "score": 0.5, "metadata": {}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_threshold_then_half_opens_after_cooldown_and_closes_on_success():
    clock = Clock()
    breaker = CircuitBreaker(name="retrieval", failure_threshold=2, cooldown_s=10, clock=clock)
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == CLOSED
    breaker.record_failure()
    assert breaker.state == OPEN and not breaker.allow()
    clock.now += 9.9
    assert not breaker.allow()
    clock.now += 0.1
    assert breaker.allow() and breaker.state == HALF_OPEN
    assert not breaker.allow(), "only one trial call in half-open"
    breaker.record_success()
    assert breaker.state == CLOSED and breaker.allow()


def test_breaker_failed_trial_reopens_for_a_full_cooldown():
    clock = Clock()
    breaker = CircuitBreaker(name="retrieval", failure_threshold=3, cooldown_s=5, clock=clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 5
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == OPEN
    clock.now += 4
    assert not breaker.allow()


def test_success_resets_the_consecutive_failure_count():
    breaker = CircuitBreaker(name="retrieval", failure_threshold=2, cooldown_s=5, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == CLOSED


def _client(handler, *, attempts=3, timeout_s=2.0, breaker=None) -> tuple[HttpRetrievalClient, httpx.AsyncClient]:
    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    client = HttpRetrievalClient(
        client=http, settings=Settings(), base_url="http://retrieval", timeout_s=timeout_s,
        attempts=attempts, backoff_base_s=0.01, breaker=breaker,
    )
    return client, http


async def _search(client: HttpRetrievalClient):
    return await client.search(query="q", top_k=3, filters=None, caller=CALLER)


def test_retries_5xx_then_succeeds():
    statuses = [500, 503, 200]

    def handler(request: httpx.Request) -> httpx.Response:
        status = statuses.pop(0)
        return httpx.Response(status, json={"results": [RESULT]} if status == 200 else {"message": "boom"})

    client, http = _client(handler)
    chunks = asyncio.run(_search(client))
    assert [c.chunk_id for c in chunks] == ["c1"] and statuses == []
    assert client.breaker.state == CLOSED
    asyncio.run(http.aclose())


def test_retries_connect_errors_up_to_attempts_then_503():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    client, http = _client(handler, attempts=3)
    with pytest.raises(DependencyUnavailable) as info:
        asyncio.run(_search(client))
    assert info.value.code == "retrieval_unavailable" and len(calls) == 3
    asyncio.run(http.aclose())


def test_4xx_is_not_retried_and_does_not_count_against_the_breaker():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(422, json={"message": "bad filter"})

    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=60)
    client, http = _client(handler, breaker=breaker)
    with pytest.raises(BadRequest):
        asyncio.run(_search(client))
    assert len(calls) == 1 and breaker.state == CLOSED
    asyncio.run(http.aclose())


def test_open_breaker_fails_fast_without_a_request():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(500)

    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=60)
    client, http = _client(handler, attempts=1, breaker=breaker)
    with pytest.raises(DependencyUnavailable):
        asyncio.run(_search(client))
    assert breaker.state == OPEN and len(calls) == 1
    with pytest.raises(DependencyUnavailable):
        asyncio.run(_search(client))
    assert len(calls) == 1
    asyncio.run(http.aclose())


def test_a_cancelled_trial_call_frees_the_half_open_breaker_for_the_next_call():
    clock = Clock()
    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=5, clock=clock)
    breaker.record_failure()
    clock.now += 5
    release = asyncio.Event()

    async def scenario() -> None:
        async def handler(request: httpx.Request) -> httpx.Response:
            await release.wait()  # the trial call hangs until its caller gives up
            return httpx.Response(200, json={"results": [RESULT]})

        http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        client = HttpRetrievalClient(client=http, settings=Settings(), base_url="http://retrieval", timeout_s=5, breaker=breaker)
        trial = asyncio.ensure_future(_search(client))
        await asyncio.sleep(0.05)
        assert breaker.state == HALF_OPEN and not breaker.allow(), "one trial at a time"
        trial.cancel()
        with pytest.raises(asyncio.CancelledError):
            await trial
        release.set()
        assert [c.chunk_id for c in await _search(client)] == ["c1"], "the next call is let through as the trial"
        assert breaker.state == CLOSED
        await http.aclose()

    asyncio.run(scenario())
