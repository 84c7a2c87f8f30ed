"""A streamed answer whose model is slow to start: keep-alive comments fill the silence on every hop, so
neither the gateway's UPSTREAM_TIMEOUT_S nor a proxy's idle timeout cuts the stream, and every reader
(httpx-sse, the official openai client) still reads the same answer. Real chat and gateway over HTTP,
the LLM stand-in, a retrieval stand-in and the real Redis."""
from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway_app
from tests.integration.chat.stand_ins import HEADERS, TOKEN, fake_retrieval_app
from tests.integration.gateway.chat_stand_in import gateway_settings, login
from tests.support import serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration

ANSWER = "Run `cairn user add NAME --role user` to add a user [1]."
KEEPALIVE = ": keep-alive"
BEAT_S = 0.1
FIRST_TEXT_AFTER_S = 0.8  # the model "reads the prompt" this long: eight beats, and beyond the gateway's timeout


@pytest.fixture(scope="module")
def chat(model, redis_url) -> Iterator[str]:
    app, _ = fake_retrieval_app()
    with serve_in_thread(app) as retrieval_url:
        settings = ChatSettings(
            service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, llm_base_url=f"{model[0]}/v1",
            llm_model="test-model", llm_timeout_s=5, llm_max_retries=0, query_reformulation="off",
            sse_keepalive_s=BEAT_S,
        )
        with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as url:
            yield url


@pytest.fixture
def gateway(chat, redis_url, unique) -> Iterator[str]:
    """A gateway that gives up on a silent chat after 0.3 s: less than the model's wait for its first text."""
    settings = gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=chat, service_token=TOKEN, upstream_timeout_s=0.3,
        sse_keepalive_s=BEAT_S,
    )
    with serve_in_thread(create_gateway_app(settings)) as url:
        yield url


@pytest.fixture
def slow_model(script):
    return script.reset(mode="stream", text=ANSWER, first_delay_s=FIRST_TEXT_AFTER_S)


def blocks(text: str) -> list[str]:
    return [block for block in text.split("\n\n") if block]


def test_chat_fills_the_wait_for_the_first_token_with_comments(chat, slow_model):
    response = httpx.post(f"{chat}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text
    sent = blocks(response.text)
    first_token = next(n for n, block in enumerate(sent) if block.startswith("event: token"))
    beats = [n for n, block in enumerate(sent) if block == KEEPALIVE]
    assert sent[0].startswith("event: sources") and len(beats) >= 3
    assert all(0 < n < first_token for n in beats)  # the chunks follow each other closely: no beat between them
    events = [block for block in sent if block != KEEPALIVE]
    done = json.loads(events[-1].split("data: ", 1)[1])
    assert events[-1].startswith("event: done") and done["answer"] == ANSWER


def test_a_stream_through_the_gateway_outlives_its_upstream_timeout(gateway, slow_model):
    with httpx.Client(base_url=gateway) as client:
        response = client.post("/api/chat/stream", json={"query": "How do I add a user?"}, headers=login(client))
    assert response.status_code == 200, response.text
    sent = blocks(response.text)
    assert KEEPALIVE in sent  # chat's comments are relayed as they are
    assert sent[-1].startswith("event: done") and json.loads(sent[-1].split("data: ", 1)[1])["answer"] == ANSWER


def test_the_openai_face_sends_its_own_comments_and_the_official_client_skips_them(gateway, slow_model):
    with httpx.Client(base_url=gateway) as client:
        auth = login(client)
        raw = client.post(
            "/v1/chat/completions", headers=auth,
            json={"messages": [{"role": "user", "content": "How do I add a user?"}], "stream": True},
        )
    sent = blocks(raw.text)
    assert KEEPALIVE in sent and sent[-1] == "data: [DONE]"
    assert not any(block.startswith("data: ") and "error" in json.loads(block[6:]) for block in sent[:-1])

    token = auth["Authorization"].removeprefix("Bearer ")
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key=token, max_retries=0)
    slow_model.reset(mode="stream", text=ANSWER, first_delay_s=FIRST_TEXT_AFTER_S)
    chunks = list(client.chat.completions.create(
        model="cairn", messages=[{"role": "user", "content": "How do I add a user?"}], stream=True
    ))
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == ANSWER
