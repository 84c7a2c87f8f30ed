"""Kept-alive connections between Cairn's services (the gateway's proxying, chat's retrieval client) against a
real uvicorn server served as the services are: a POST sent after a pause just longer than the server keeps an
idle connection must not go out on the connection the server is closing.

The race: the server closes the idle connection; if the client has not yet read that close (its event loop
was busy, or the close was on its way), it writes the request on the dead connection and gets
ServerDisconnectedError, which the user sees as a one-off 503 from a healthy service. The tests keep the
client's event loop busy for the whole pause, so the close is never read before the request goes: the race,
every time rather than now and then.
"""
from __future__ import annotations

import asyncio
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request

from services.chat.adapters import retrieval_client
from services.chat.settings import Settings as ChatSettings
from services.gateway.adapters import upstream
from shared.caller import Caller
from shared.replicas import ReplicaPool
from shared.web import SERVER_OPTIONS
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration


def server_keep_alive_s() -> float:
    """How long the services' uvicorn keeps an idle connection open, as shared.web.serve starts it."""
    return uvicorn.Config(FastAPI(), **SERVER_OPTIONS).timeout_keep_alive


def counting_service() -> tuple[FastAPI, list[int]]:
    """A service that answers every POST and records the client port of each (one port: one connection)."""
    app = FastAPI()
    ports: list[int] = []

    @app.post("/chat")
    async def chat(request: Request) -> dict:
        ports.append(request.client.port)
        return {"answer": "ok"}

    @app.post("/search")
    async def search(request: Request) -> dict:
        ports.append(request.client.port)
        return {"results": []}

    return app, ports


@pytest.fixture
def service():
    app, ports = counting_service()
    with serve_in_thread(app) as url:
        yield url, ports


def pause_past_the_servers_keep_alive() -> None:
    time.sleep(server_keep_alive_s() + 0.5)  # blocking on purpose: the client's loop does not see the close


def test_the_gateway_sends_a_question_after_a_pause_on_a_connection_that_is_open(service):
    url, ports = service

    async def scenario() -> list[int]:
        session = upstream.open_session(timeout_s=5)
        chat = upstream.Upstream(name="chat", session=session, replicas=ReplicaPool(service="chat", urls=[url]))
        try:
            statuses = [(await chat.forward(method="POST", path="/chat", headers={}, body=b"{}")).status_code]
            pause_past_the_servers_keep_alive()
            statuses.append((await chat.forward(method="POST", path="/chat", headers={}, body=b"{}")).status_code)
            return statuses
        finally:
            await session.close()

    assert asyncio.run(scenario()) == [200, 200]
    assert len(ports) == 2  # each question reached chat once
    assert ports[0] != ports[1]  # the second went on a new connection


def test_chat_searches_after_a_pause_on_a_connection_that_is_open(service):
    url, ports = service

    async def scenario() -> None:
        session = retrieval_client.open_session()
        client = retrieval_client.HttpRetrievalClient(
            session=session, settings=ChatSettings(), replicas=ReplicaPool(service="retrieval", urls=[url]),
            timeout_s=5, attempts=1,  # no retry to hide a lost request
        )
        caller = Caller(user_id="u1", roles=("user",), session_id=None)
        try:
            await client.search(query="q", top_k=3, filters=None, caller=caller)
            pause_past_the_servers_keep_alive()
            await client.search(query="q", top_k=3, filters=None, caller=caller)
        finally:
            await session.close()

    asyncio.run(scenario())
    assert len(ports) == 2 and ports[0] != ports[1]
