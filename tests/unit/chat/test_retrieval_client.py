"""The retrieval client's retry policy, circuit breaker and replica balancing, against real local HTTP servers
(aiohttp's test server on free loopback ports) and ports where nothing listens; breaker and pool on injectable clocks."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import REGISTRY

from services.chat.adapters.circuit_breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker
from services.chat.adapters.retrieval_client import HttpRetrievalClient
from services.chat.settings import Settings
from shared.caller import Caller
from shared.errors import BadRequest, DependencyUnavailable
from shared.replicas import ReplicaPool
from tests.support import free_port

CALLER = Caller(user_id="u1", roles=["user"], session_id="s1")
RESULT = {"chunk_id": "c1", "doc_id": "d1", "content": "text", "score": 0.5, "metadata": {}}
Handler = Callable[[web.Request], Awaitable[web.Response]]


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


def test_breaker_tells_the_time_left_until_its_trial():
    clock = Clock()
    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=10, clock=clock)
    assert breaker.seconds_until_trial() == 0  # closed
    breaker.record_failure()
    clock.now += 7.5
    assert breaker.seconds_until_trial() == 2.5
    clock.now += 2.5
    assert breaker.allow() and breaker.state == HALF_OPEN
    assert breaker.seconds_until_trial() == 0  # the trial is out: only its verdict is awaited


def test_success_resets_the_consecutive_failure_count():
    breaker = CircuitBreaker(name="retrieval", failure_threshold=2, cooldown_s=5, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == CLOSED


class Retrieval:
    """A retrieval replica on a free loopback port: POST /search answered by `handler`, calls counted."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.calls: list[dict] = []
        self.handler = handler or ok
        app = web.Application()
        app.router.add_post("/search", self._search)
        app.router.add_get("/healthz", healthz)
        self.server = TestServer(app, host="127.0.0.1")

    async def _search(self, request: web.Request) -> web.Response:
        self.calls.append(await request.json())
        return await self.handler(request)

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")


async def _json(body: dict, status: int = 200) -> web.Response:
    return web.json_response(body, status=status)


async def healthz(request: web.Request) -> web.Response:
    return await _json({"status": "ok"})


async def ok(request: web.Request) -> web.Response:
    return await _json({"results": [RESULT]})


_REFUSALS_BEFORE: dict[str, float] = {}


def nowhere() -> str:
    """A loopback URL where nothing listens: connections are refused. `refusals` counts from now on: the
    counter is process-wide and an earlier test may have been refused on the same port."""
    url = f"http://127.0.0.1:{free_port()}"
    _REFUSALS_BEFORE[url] = _refusals_so_far(url)
    return url


@asynccontextmanager
async def running(*replicas: Retrieval) -> AsyncIterator[None]:
    for replica in replicas:
        await replica.server.start_server()
    try:
        yield
    finally:
        for replica in replicas:
            await replica.server.close()


@asynccontextmanager
async def retrieval_client(
    *urls: str, attempts: int = 3, timeout_s: float = 2.0, breaker: CircuitBreaker | None = None, clock=time.monotonic
) -> AsyncIterator[HttpRetrievalClient]:
    async with aiohttp.ClientSession() as session:
        yield HttpRetrievalClient(
            session=session, settings=Settings(), replicas=ReplicaPool(service="retrieval", urls=urls, clock=clock),
            timeout_s=timeout_s, attempts=attempts, backoff_base_s=0.01, breaker=breaker,
        )


async def _search(client: HttpRetrievalClient):
    return await client.search(query="q", top_k=3, filters=None, caller=CALLER)


def refusals(url: str) -> float:
    """Refused connections to `url` since nowhere() handed it out."""
    return _refusals_so_far(url) - _REFUSALS_BEFORE.get(url, 0)


def _refusals_so_far(url: str) -> float:
    return REGISTRY.get_sample_value("cairn_upstream_unreachable_total", {"service": "retrieval", "upstream": url}) or 0


async def test_retries_5xx_then_succeeds():
    statuses = [500, 503, 200]

    async def scripted(request: web.Request) -> web.Response:
        status = statuses.pop(0)
        return await _json({"results": [RESULT]} if status == 200 else {"message": "boom"}, status)

    replica = Retrieval(scripted)
    async with running(replica), retrieval_client(replica.url) as client:
        chunks = await _search(client)
    assert [c.chunk_id for c in chunks] == ["c1"] and statuses == [] and len(replica.calls) == 3
    assert client.breaker.state == CLOSED


async def test_retries_connect_errors_up_to_attempts_then_503():
    url = nowhere()
    async with retrieval_client(url, attempts=3) as client:
        with pytest.raises(DependencyUnavailable) as info:
            await _search(client)
    assert info.value.code == "retrieval_unavailable" and refusals(url) == 3


async def test_4xx_is_not_retried_and_does_not_count_against_the_breaker():
    replica = Retrieval(lambda request: _json({"message": "bad filter"}, 422))
    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=60)
    async with running(replica), retrieval_client(replica.url, breaker=breaker) as client:
        with pytest.raises(BadRequest) as info:
            await _search(client)
    assert (info.value.status_code, info.value.code) == (400, "invalid_search")  # docs/api.md: chat's 400
    assert info.value.message == "retrieval rejected the search: bad filter"
    assert len(replica.calls) == 1 and breaker.state == CLOSED


async def test_chroma_down_behind_retrieval_is_named_and_does_not_open_the_breaker():
    """Filtered searches need Chroma, unfiltered ones are answered from memory: a 503 naming chroma says
    nothing about retrieval, whose other searches still work."""

    async def filtered_need_chroma(request: web.Request) -> web.Response:
        if (await request.json()).get("filters"):
            return await _json({"error": "chroma_unavailable", "message": "chroma is unavailable"}, 503)
        return await _json({"results": [RESULT]})

    replica = Retrieval(filtered_need_chroma)
    breaker = CircuitBreaker(name="retrieval", failure_threshold=2, cooldown_s=60)
    async with running(replica), retrieval_client(replica.url, attempts=2, breaker=breaker) as client:
        for _ in range(3):
            with pytest.raises(DependencyUnavailable) as info:
                await client.search(query="q", top_k=3, filters={"category": "guide"}, caller=CALLER)
            assert info.value.code == "chroma_unavailable"
        assert breaker.state == CLOSED
        assert [c.chunk_id for c in await _search(client)] == ["c1"]


async def test_an_unreachable_retrieval_is_named_without_its_addresses():
    url = nowhere()
    async with retrieval_client(url, attempts=1) as client:
        with pytest.raises(DependencyUnavailable) as info:
            await _search(client)
    assert "127.0.0.1" not in info.value.message and info.value.message == "retrieval is unavailable (unreachable)"


async def test_open_breaker_fails_fast_without_a_request():
    replica = Retrieval(lambda request: _json({"message": "boom"}, 500))
    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=60)
    async with running(replica), retrieval_client(replica.url, attempts=1, breaker=breaker) as client:
        with pytest.raises(DependencyUnavailable):
            await _search(client)
        assert breaker.state == OPEN and len(replica.calls) == 1
        with pytest.raises(DependencyUnavailable):
            await _search(client)
    assert len(replica.calls) == 1


async def test_a_cancelled_trial_call_frees_the_half_open_breaker_for_the_next_call():
    clock = Clock()
    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=5, clock=clock)
    breaker.record_failure()
    clock.now += 5
    release = asyncio.Event()

    async def hanging(request: web.Request) -> web.Response:
        await release.wait()  # the trial call hangs until its caller gives up
        return await ok(request)

    replica = Retrieval(hanging)
    async with running(replica), retrieval_client(replica.url, timeout_s=5, breaker=breaker) as client:
        trial = asyncio.ensure_future(_search(client))
        await asyncio.sleep(0.05)
        assert breaker.state == HALF_OPEN and not breaker.allow(), "one trial at a time"
        trial.cancel()
        with pytest.raises(asyncio.CancelledError):
            await trial
        release.set()
        assert [c.chunk_id for c in await _search(client)] == ["c1"], "the next call is let through as the trial"
        assert breaker.state == CLOSED


async def test_a_silent_replica_gives_503_within_the_overall_timeout():
    async def silent(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return await ok(request)

    replica = Retrieval(silent)
    async with running(replica), retrieval_client(replica.url, timeout_s=0.5) as client:
        started = time.monotonic()
        with pytest.raises(DependencyUnavailable) as info:
            await _search(client)
    assert info.value.code == "retrieval_unavailable" and time.monotonic() - started < 1.5
    assert len(replica.calls) == 1, "the first attempt used the whole budget"


async def test_replicas_take_turns():
    first, second = Retrieval(), Retrieval()
    async with running(first, second), retrieval_client(first.url, second.url) as client:
        for _ in range(4):
            await _search(client)
    assert (len(first.calls), len(second.calls)) == (2, 2)


async def test_a_refused_connection_sends_the_same_search_to_another_replica_and_skips_the_first_for_a_while():
    clock = Clock()
    dead, alive = nowhere(), Retrieval()
    breaker = CircuitBreaker(name="retrieval", failure_threshold=1, cooldown_s=60)
    async with running(alive), retrieval_client(dead, alive.url, attempts=1, breaker=breaker, clock=clock) as client:
        chunks = await _search(client)
        assert [c.chunk_id for c in chunks] == ["c1"] and len(alive.calls) == 1, "one attempt: the failover is within it"
        assert refusals(dead) == 1 and breaker.state == CLOSED
        for _ in range(3):
            await _search(client)
        assert refusals(dead) == 1 and len(alive.calls) == 4, "the refusing replica is not tried while it cools down"
        clock.now += 2  # the pool's first cooldown
        await _search(client)
        await _search(client)
    assert refusals(dead) == 2 and len(alive.calls) == 6, "after the cooldown it is tried again, and fails over again"


async def test_a_5xx_is_retried_on_the_next_replica():
    failing, healthy = Retrieval(lambda request: _json({"message": "boom"}, 500)), Retrieval()
    async with running(failing, healthy), retrieval_client(failing.url, healthy.url) as client:
        chunks = await _search(client)
    assert chunks and (len(failing.calls), len(healthy.calls)) == (1, 1)


async def test_a_search_is_not_retried_on_a_replica_that_failed_it_while_another_is_left():
    """Concurrent searches move the turn on, so without this the retry of one lands on the failing replica
    again now and then, and with its attempts spent the question fails while a healthy replica was there."""
    failing, healthy = Retrieval(lambda request: _json({"message": "boom"}, 500)), Retrieval()
    async with running(failing, healthy), retrieval_client(failing.url, healthy.url, attempts=2) as client:
        answers = await asyncio.gather(*(_search(client) for _ in range(6)), return_exceptions=True)
    assert all(isinstance(chunks, list) and chunks for chunks in answers), answers
    assert (len(failing.calls), len(healthy.calls)) == (3, 6), "turns alternate; each failed search moved over"


async def test_every_replica_down_is_503_retrieval_unavailable_at_once():
    urls = [nowhere(), nowhere()]
    async with retrieval_client(*urls, attempts=2, timeout_s=5) as client:
        started = time.monotonic()
        with pytest.raises(DependencyUnavailable) as info:
            await _search(client)
        assert info.value.code == "retrieval_unavailable" and time.monotonic() - started < 1
        assert not (await client.readiness())["retrieval"]
    assert [refusals(url) for url in urls] == [2, 2], "each attempt tried both replicas"


async def test_ready_while_one_replica_answers():
    alive = Retrieval()
    async with running(alive), retrieval_client(nowhere(), alive.url) as client:
        assert (await client.readiness())["retrieval"]
