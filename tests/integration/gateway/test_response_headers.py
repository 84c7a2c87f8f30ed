"""The headers a public client gets from the real gateway, over real HTTP with the real Redis, in front of a chat
stand-in made as chat is (create_service_app, served by uvicorn as every service is): answers, streams and
errors relayed from chat, the gateway's own errors and an error no handler foresaw all carry the gateway's
documented security and CORS headers, once, and nothing that names the server or belongs to the hop behind."""
import json

import httpx
import pytest
from fastapi.responses import JSONResponse, StreamingResponse

from services.gateway.main import create_app
from shared.web import create_service_app
from tests.integration.gateway.chat_stand_in import gateway_settings, login
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration
ORIGIN = "https://app.example"
# Generous: these tests read headers, and on a loaded machine two in-process servers can be slow to answer.
TIMEOUT_S = 30
SECURITY_HEADERS = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "cache-control": "no-store"}


ANSWER = {
    "query": "How?", "answer": "An answer.", "conversation_id": None, "citations": [], "sources": [],
    "related_docs": [], "confidence": {"level": "High", "score": 0.9, "reason": "stand-in"}, "grounding": None,
    "metadata": {"kind": "answer", "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
}


def _chat_as_served():
    """Answers as chat's routes do: a JSON answer, an event stream with chat's own stream headers, and
    chat's own error in Cairn's shape."""
    app = create_service_app(service="chat", title="chat stand-in")

    @app.get("/models")
    async def models() -> dict:
        return {"default": "stand-in-llm", "models": ["stand-in-llm"]}

    @app.post("/chat")
    async def chat(question: dict):
        if question["query"] == "someone else's conversation":
            return JSONResponse({"error": "conversation_not_found", "message": "no such conversation"}, status_code=404)
        return ANSWER

    @app.post("/chat/stream")
    async def chat_stream() -> StreamingResponse:
        async def events():
            yield f"event: sources\ndata: {json.dumps({'sources': []})}\n\n"
            yield f"event: token\ndata: {json.dumps({'text': 'An answer.'})}\n\n"
            yield f"event: done\ndata: {json.dumps(ANSWER)}\n\n"

        # As services.chat.api answers a stream.
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    return app


@pytest.fixture(scope="module")
def chat_url():
    with serve_in_thread(_chat_as_served()) as url:
        yield url


@pytest.fixture
def gateway(redis_url, unique, chat_url):
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url, cors_origins=[ORIGIN])
    with serve_in_thread(create_app(settings)) as url:
        yield url


def _assert_public_headers(response: httpx.Response) -> None:
    headers = response.headers
    for name, value in SECURITY_HEADERS.items():
        assert headers.get_list(name) == [value], (name, headers)
    assert headers.get_list("access-control-allow-origin") == [ORIGIN]
    assert len(headers.get_list("x-request-id")) == 1 and len(headers.get_list("date")) == 1
    assert "server" not in headers  # a public service does not advertise what it runs on


@pytest.mark.parametrize(
    ("path", "query", "status"),
    [("/api/chat", "How?", 200), ("/api/chat/stream", "How?", 200),
     ("/api/chat", "someone else's conversation", 404), ("/api/search", "How?", 503)],  # retrieval: nothing listens
)
def test_relayed_answers_streams_and_errors_carry_the_gateways_headers_once(gateway, path, query, status):
    with httpx.Client(base_url=gateway, headers={"Origin": ORIGIN}, timeout=TIMEOUT_S) as client:
        response = client.post(path, json={"query": query}, headers=login(client))
    assert response.status_code == status, response.text
    _assert_public_headers(response)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_completions_carry_the_gateways_headers_once(gateway, stream):
    body = {"model": "cairn", "messages": [{"role": "user", "content": "How?"}], "stream": stream}
    with httpx.Client(base_url=gateway, headers={"Origin": ORIGIN}, timeout=TIMEOUT_S) as client:
        response = client.post("/v1/chat/completions", json=body, headers=login(client))
    assert response.status_code == 200, response.text
    _assert_public_headers(response)


def test_a_stream_relayed_from_chat_keeps_what_a_proxy_in_front_needs(gateway):
    with httpx.Client(base_url=gateway, timeout=TIMEOUT_S) as client:
        response = client.post("/api/chat/stream", json={"query": "How?"}, headers=login(client))
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-accel-buffering"] == "no"  # nginx in front must not buffer the stream
    assert "event: done" in response.text


def test_an_error_no_handler_foresaw_carries_the_security_and_cors_headers_too(gateway, monkeypatch):
    def a_bug(*args, **kwargs):
        raise RuntimeError("a bug in reading sessions")

    with httpx.Client(base_url=gateway, headers={"Origin": ORIGIN}, timeout=TIMEOUT_S) as client:
        auth = login(client)
        # The gateway is served in this process: reading the session now fails as a bug would, not as bad input.
        monkeypatch.setattr("services.gateway.adapters.redis_store.session_from_record", a_bug)
        response = client.get("/auth/me", headers=auth)
    assert response.status_code == 500 and response.json()["error"] == "internal_error"
    _assert_public_headers(response)  # a page on another origin can read the error and its X-Request-ID
