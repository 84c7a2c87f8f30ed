"""A compressed request body (Content-Encoding) through the real gateway, over real HTTP with the real Redis, in
front of a chat stand-in that reads JSON as chat does: Cairn takes bodies as they are, so a body under any
content coding is refused with 415 naming the coding, never passed on to be misread as malformed JSON."""
import gzip
import json
import zlib

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from services.gateway.main import create_app
from shared.web import create_service_app
from tests.integration.gateway.chat_stand_in import PASSWORD, gateway_settings, login
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration
QUESTION = json.dumps({"query": "How do I add a user?"}).encode()


class Question(BaseModel):
    query: str


def strict_chat() -> tuple[FastAPI, list[str]]:
    """Parses the body as the chat service does (a 400 malformed_json for bytes that are not JSON)."""
    app = create_service_app(service="chat", title="chat stand-in")
    asked: list[str] = []

    @app.post("/chat")
    async def chat(question: Question) -> dict:
        asked.append(question.query)
        return {"answer": "ok"}

    return app, asked


@pytest.fixture(scope="module")
def chat():
    app, asked = strict_chat()
    with serve_in_thread(app) as url:
        yield url, asked


@pytest.fixture
def gateway(redis_url, unique, chat):
    with serve_in_thread(create_app(gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat[0]))) as url:
        yield url


def _compressed(coding: str, body: bytes) -> bytes:
    return {"gzip": gzip.compress, "deflate": zlib.compress}.get(coding, lambda b: b"\x1b\x00" + b)(body)


def _assert_415_naming(response: httpx.Response, coding: str) -> None:
    assert response.status_code == 415, response.text
    assert response.json()["error"] == "unsupported_media_type"
    assert coding in response.json()["message"]
    assert response.headers["accept-encoding"] == "identity"  # RFC 9110: which codings would have been taken


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "x-unknown"])
def test_a_compressed_question_is_refused_with_415_naming_the_coding(gateway, chat, coding):
    _, asked = chat
    with httpx.Client(base_url=gateway) as client:
        headers = {**login(client), "Content-Type": "application/json", "Content-Encoding": coding}
        response = client.post("/api/chat", content=_compressed(coding, QUESTION), headers=headers)
    _assert_415_naming(response, coding)
    assert asked == []  # never passed on


def test_the_gateways_own_json_routes_refuse_a_compressed_body_too(gateway):
    body = json.dumps({"username": "ann", "password": PASSWORD}).encode()
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    with httpx.Client(base_url=gateway) as client:
        _assert_415_naming(client.post("/auth/login", content=gzip.compress(body), headers=headers), "gzip")
        auth = login(client)
        completion = json.dumps({"model": "any", "messages": [{"role": "user", "content": "hi"}]}).encode()
        v1 = client.post("/v1/chat/completions", content=gzip.compress(completion), headers={**auth, **headers})
    assert v1.status_code == 415, v1.text
    assert v1.json()["error"]["code"] == "unsupported_media_type" and "gzip" in v1.json()["error"]["message"]
    assert v1.headers["accept-encoding"] == "identity"


def test_a_body_sent_as_it_is_still_gets_through(gateway, chat):
    _, asked = chat
    with httpx.Client(base_url=gateway) as client:
        auth = login(client)
        for coding in ("identity", "IDENTITY"):
            headers = {**auth, "Content-Type": "application/json", "Content-Encoding": coding}
            response = client.post("/api/chat", content=QUESTION, headers=headers)
            assert response.status_code == 200, response.text
        # A coding named on a request without a body codes nothing: the request goes on as usual.
        assert client.get("/auth/me", headers={**auth, "Content-Encoding": "gzip"}).status_code == 200
    assert asked == ["How do I add a user?"] * 2
