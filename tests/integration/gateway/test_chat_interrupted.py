"""A chat that dies mid-question publishes no outcome: the gateway reports the question failed in its place.

The stand-in chat is a bare TCP server that takes the question and then drops the connection, as a chat
process killed mid-question does (a half-sent answer for streams); the events are read from the real broker.
"""
import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from services.gateway.main import create_app
from shared.events import QueryFailed
from tests.integration.gateway.chat_stand_in import gateway_settings, login
from tests.support import read_events

pytestmark = pytest.mark.integration

_MODELS = json.dumps({"default": "stand-in-llm", "models": ["stand-in-llm"]}).encode()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    length = lengths[0] if lengths else 0
    while len(body) < length:
        body += conn.recv(65536)
    return head.split(b"\r\n")[0]


def _serve(listener: socket.socket, behaviour: str) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            request_line = _read_request(conn)
            if request_line.startswith(b"GET /models"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(_MODELS), _MODELS))
            elif request_line.startswith(b"POST /chat/stream") and behaviour == "dies":
                event = b'event: sources\ndata: {"sources": []}\n\n'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"%x\r\n%s\r\n" % (len(event), event))
            elif behaviour == "silent":
                threading.Event().wait(3)
            # "dies": the connection closes with the question taken and no (whole) answer


@contextmanager
def chat_that(behaviour: str) -> Iterator[str]:
    """A chat URL whose /chat and /chat/stream take the question, then `behaviour`: "dies" or goes "silent"."""
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=_serve, args=(listener, behaviour), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def _gateway(redis_url, amqp_url, unique, chat_url, prefix=None, **overrides):
    settings = gateway_settings(
        redis_url=redis_url, prefix=prefix or unique, chat_url=chat_url, amqp_url=amqp_url,
        events_exchange=f"{unique}.events", analytics_queue=f"{unique}.analytics", **overrides,
    )
    return TestClient(create_app(settings))


ROUTES = {
    "/api/chat": {"query": "How do pumps work?"},
    "/api/chat/stream": {"query": "How do pumps work?"},
    "/v1/chat/completions": {"model": "cairn", "messages": [{"role": "user", "content": "How do pumps work?"}]},
    "/v1/chat/completions stream": {
        "model": "cairn", "stream": True, "messages": [{"role": "user", "content": "How do pumps work?"}]
    },
}


@pytest.mark.parametrize("route", ROUTES)
def test_a_question_chat_died_on_is_published_failed_by_the_gateway(redis_url, amqp_url, unique, route):
    with chat_that("dies") as chat_url, _gateway(redis_url, amqp_url, unique, chat_url) as client:
        ann = login(client, "ann")
        user_id = client.get("/auth/me", headers=ann).json()["user"]["id"]
        answer = client.post(route.split()[0], json=ROUTES[route], headers={**ann, "X-Request-ID": f"{unique}-q"})
        # /api/chat/stream has sent its 200 with the sources; /v1 holds its status for the model's first word
        status = 200 if route == "/api/chat/stream" else 503
        assert answer.status_code == status and "chat_unavailable" in answer.text, answer.text
        received = asyncio.run(read_events(amqp_url, unique, 2, timeout=5))

    assert [type(event) for _, event in received] == [QueryFailed]
    failed = received[0][1]
    assert (failed.source_service, failed.request_id, failed.user_id) == ("gateway", f"{unique}-q", user_id)
    assert failed.session_id and failed.trace_id
    assert (failed.data.stage, failed.data.error, failed.data.query) == (
        "interrupted", "chat_unavailable", "How do pumps work?"
    )
    assert failed.data.total_ms is not None and failed.data.total_ms >= 0


def test_a_chat_that_is_silent_or_never_reached_reports_its_questions_itself(redis_url, amqp_url, unique):
    """A timeout leaves chat running, and it reports the question; a question no chat took was never asked."""
    silent = chat_that("silent")
    with silent as chat_url, _gateway(redis_url, amqp_url, unique, chat_url, upstream_timeout_s=1) as client:
        ann = login(client, "ann")
        assert client.post("/api/chat", json=ROUTES["/api/chat"], headers=ann).status_code == 504
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{unused.getsockname()[1]}"
        with _gateway(redis_url, amqp_url, unique, nowhere, prefix=f"{unique}-nowhere") as client:
            ann = login(client, "ann")
            assert client.post("/api/chat", json=ROUTES["/api/chat"], headers=ann).status_code == 503
    assert asyncio.run(read_events(amqp_url, unique, 1, timeout=3)) == []
