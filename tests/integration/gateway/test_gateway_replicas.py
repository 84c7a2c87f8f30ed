"""The gateway balancing over several chat and retrieval replicas (real HTTP servers, real Redis): replicas take
turns, a replica refusing connections is skipped and the request goes to another one, and a request that reached
a replica is never sent again, unless it changes nothing (a search, a read)."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from aiohttp import web
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from services.gateway.adapters.upstream import Upstream, open_session
from services.gateway.main import create_app
from services.gateway.settings import Settings
from shared.replicas import ReplicaPool
from tests.integration.gateway.chat_stand_in import gateway_settings, login
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.integration


class Replica:
    """A chat-and-retrieval stand-in that counts what reached it and answers per `mode`: ok, fail (500),
    unavailable (503, as a replica not ready), hang."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.calls: list[str] = []
        self.client_ports: list[int] = []  # one per request: the same port twice means a kept-alive connection
        self.app = FastAPI()

        @self.app.get("/healthz")
        async def healthz() -> dict:
            return {"status": "ok"}

        @self.app.post("/chat")
        @self.app.post("/search")
        async def answer(request: Request):
            self.calls.append(request.url.path)
            self.client_ports.append(request.client.port)
            if self.mode == "hang":
                await asyncio.sleep(2)
            return self._failure() or {"answer": "stand-in", "results": [], "query": (await request.json())["query"]}

        @self.app.get("/documents")
        async def documents():
            self.calls.append("/documents")
            if self.mode == "hang":
                await asyncio.sleep(2)
            return self._failure() or {"documents": []}

        @self.app.post("/chat/stream")
        async def stream(request: Request) -> StreamingResponse:
            self.calls.append("/chat/stream")

            async def events():
                yield f"event: sources\ndata: {json.dumps({'sources': []})}\n\n"
                yield "event: done\ndata: {}\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

    def _failure(self) -> JSONResponse | None:
        if self.mode == "fail":
            return JSONResponse({"error": "internal_error", "message": "boom"}, status_code=500)
        if self.mode == "unavailable":
            return JSONResponse({"error": "not_ready", "message": "still loading"}, status_code=503)
        return None


def nowhere() -> str:
    return f"http://127.0.0.1:{free_port()}"


def refusals(service: str, url: str) -> float:
    return REGISTRY.get_sample_value("cairn_upstream_unreachable_total", {"service": service, "upstream": url}) or 0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def replicas() -> Iterator[tuple[Replica, Replica, list[str]]]:
    first, second = Replica(), Replica()
    with ExitStack() as stack:
        urls = [stack.enter_context(serve_in_thread(replica.app)) for replica in (first, second)]
        yield first, second, urls


@contextmanager
def gateway(settings: Settings, **pools: list[str]) -> Iterator[tuple[TestClient, Clock]]:
    """A started gateway whose replica pools for `pools` (chat=[...], retrieval=[...]) run on one test clock."""
    clock = Clock()
    with TestClient(create_app(settings)) as client:
        for name, urls in pools.items():
            client.app.state.upstreams[name].replicas = ReplicaPool(service=name, urls=urls, clock=clock)
        yield client, clock


def test_chat_replicas_take_turns_and_one_refusing_connections_is_skipped_for_its_cooldown(redis_url, unique, replicas):
    first, second, urls = replicas
    dead = nowhere()
    chat_urls = [dead, *urls]
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=",".join(chat_urls))
    with gateway(settings, chat=chat_urls) as (client, clock):
        auth = login(client)
        answers = [client.post("/api/chat", json={"query": f"q{i}"}, headers=auth) for i in range(6)]
        assert [a.status_code for a in answers] == [200] * 6 and answers[0].json()["query"] == "q0"
        assert (len(first.calls), len(second.calls)) == (3, 3)
        assert refusals("chat", dead) == 1, "tried once, then skipped while it cools down"

        clock.now += 2  # the first cooldown is over: the dead replica is tried again, and the request still succeeds
        assert client.post("/api/chat", json={"query": "again"}, headers=auth).status_code == 200
        assert refusals("chat", dead) == 2 and len(first.calls) + len(second.calls) == 7


def test_questions_keep_their_connection_to_a_single_chat_but_open_one_each_across_replicas(redis_url, unique, replicas):
    first, second, urls = replicas
    for chat_urls in ([urls[0]], urls):
        settings = gateway_settings(redis_url=redis_url, prefix=f"{unique}-{len(chat_urls)}", chat_url=",".join(chat_urls))
        with TestClient(create_app(settings)) as client:
            auth = login(client)
            answers = [client.post("/api/chat", json={"query": f"q{i}"}, headers=auth) for i in range(4)]
        assert [a.status_code for a in answers] == [200] * 4
    single, replicated = first.client_ports[:4], first.client_ports[4:] + second.client_ports
    assert len(set(single)) == 1, "one chat: the gateway keeps its connection alive"
    assert len(set(replicated)) == 4, "several: each question on a new connection, which a dead replica refuses"


def test_a_stream_fails_over_before_it_starts(redis_url, unique, replicas):
    first, _, urls = replicas
    dead = nowhere()
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=f"{dead},{urls[0]}")
    with TestClient(create_app(settings)) as client:
        auth = login(client)
        with client.stream("POST", "/api/chat/stream", json={"query": "q"}, headers=auth) as response:
            body = response.read().decode()
    assert response.status_code == 200 and "event: sources" in body and "event: done" in body
    assert first.calls == ["/chat/stream"] and refusals("chat", dead) == 1


def test_search_and_documents_are_balanced_over_retrieval_replicas(redis_url, unique, replicas):
    first, second, urls = replicas
    dead = nowhere()
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=nowhere(), retrieval_urls=[*urls, dead])
    with TestClient(create_app(settings)) as client:
        user, admin = login(client), login(client, "ada")
        searches = [client.post("/api/search", json={"query": "q"}, headers=user) for _ in range(4)]
        listed = [client.get("/api/documents", headers=admin) for _ in range(2)]
    assert [r.status_code for r in searches + listed] == [200] * 6
    assert len(first.calls) + len(second.calls) == 6 and first.calls and second.calls
    assert refusals("retrieval", dead) == 1


def test_every_replica_down_is_503_naming_the_service_at_once(redis_url, unique):
    settings = gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=f"{nowhere()},{nowhere()}", retrieval_urls=[nowhere(), nowhere()]
    )
    with TestClient(create_app(settings)) as client:
        auth = login(client)
        started = time.monotonic()
        chat = client.post("/api/chat", json={"query": "q"}, headers=auth)
        search = client.post("/api/search", json={"query": "q"}, headers=auth)
        elapsed = time.monotonic() - started
        ready = client.get("/readyz")
    assert (chat.status_code, chat.json()["error"]) == (503, "chat_unavailable")
    assert (search.status_code, search.json()["error"]) == (503, "retrieval_unavailable")
    assert settings.upstream_timeout_s >= 60
    assert elapsed < 10, "refused connections fail fast, without waiting for a timeout"
    # Reported, not needed: a gateway leaving its load balancer would take every route down with chat.
    assert ready.status_code == 200 and ready.json()["checks"]["chat"] is False


@pytest.mark.parametrize(
    ("mode", "status", "error"),
    [("fail", 500, "internal_error"), ("unavailable", 503, "not_ready"), ("hang", 504, "chat_timeout")],
)
def test_a_request_that_reached_a_replica_is_never_sent_to_another(redis_url, unique, replicas, mode, status, error):
    first, second, urls = replicas
    first.mode = mode
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=",".join(urls), upstream_timeout_s=0.5)
    with TestClient(create_app(settings)) as client:
        answer = client.post("/api/chat", json={"query": "q"}, headers=login(client))
    assert (answer.status_code, answer.json()["error"]) == (status, error)
    assert (first.calls, second.calls) == (["/chat"], []), "a POST /chat may have run: it is not repeated"


@pytest.mark.parametrize("mode", ["unavailable", "hang"])
def test_a_search_or_read_that_failed_on_the_replica_it_reached_is_answered_by_another(redis_url, unique, replicas, mode):
    """A search and a GET change nothing, so one that a replica answered 503 (not ready, say) or left unanswered
    is sent once more, to another replica; a replica silent for a whole timeout is then skipped for a while."""
    first, second, urls = replicas
    first.mode = mode
    settings = gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=nowhere(), retrieval_urls=urls, upstream_timeout_s=0.5
    )
    with gateway(settings, retrieval=urls) as (client, _):
        user, admin = login(client), login(client, "ada")
        answers = [client.post("/api/search", json={"query": f"q{i}"}, headers=user) for i in range(4)]
        answers += [client.get("/api/documents", headers=admin) for _ in range(2)]
    assert [a.status_code for a in answers] == [200] * 6, [a.text for a in answers]
    assert len(second.calls) == 6, "every request answered by the replica that works"
    if mode == "hang":
        assert first.calls == ["/search"], "skipped once it had left a request unanswered"
    else:
        assert len(first.calls) == 6, "a replica answering 503 is not skipped: it is asked, and the request sent on"


def test_a_read_with_no_other_replica_to_turn_to_gets_the_answer_of_the_one_it_reached(redis_url, unique, replicas):
    first, _, urls = replicas
    first.mode = "unavailable"
    dead = nowhere()
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=nowhere(), retrieval_urls=[urls[0], dead])
    with gateway(settings, retrieval=[urls[0], dead]) as (client, _):
        answer = client.post("/api/search", json={"query": "q"}, headers=login(client))
    assert (answer.status_code, answer.json()["error"]) == (503, "not_ready")
    assert first.calls == ["/search"]


async def test_many_long_streams_at_once_mark_no_healthy_replica_down():
    """More streams in hand than a capped connection pool held: a request waited for a free connection
    under the connect timeout, and its expiry counted as the replica refusing."""
    async def slow_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(4):
            await response.write(b"event: token\ndata: {}\n\n")
            await asyncio.sleep(1)
        return response

    app = web.Application()
    app.router.add_post("/chat/stream", slow_stream)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    url = f"http://127.0.0.1:{port}"
    replicas = ReplicaPool(service="chat-pool-test", urls=[url])
    session = open_session(timeout_s=2)
    upstream = Upstream(name="chat", session=session, replicas=replicas)

    async def read_a_stream() -> int:
        stream = await upstream.forward_stream(
            route="/api/chat/stream", method="POST", path="/chat/stream", headers={}, body=b"{}"
        )
        try:
            await asyncio.sleep(3)  # the client reads for longer than the connect timeout: the connection stays in use
            return stream.status_code
        finally:
            await stream.body_iterator.aclose()  # type: ignore[attr-defined]

    try:
        statuses = await asyncio.gather(*(read_a_stream() for _ in range(220)))
    finally:
        await session.close()
        await runner.cleanup()
    assert statuses == [200] * 220
    assert REGISTRY.get_sample_value("cairn_upstream_unreachable_total", {"service": "chat-pool-test", "upstream": url}) is None
