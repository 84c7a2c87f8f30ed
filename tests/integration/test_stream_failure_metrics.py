"""Streams that fail after their 200 was sent, counted on /metrics (cairn_stream_failures_total): the request
count says 200 for them. Real chat and gateway over HTTP, the LLM stand-in, a retrieval stand-in, a chat
stand-in whose stream dies part way, and the real Redis."""
from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway_app
from tests.integration.chat.llm_stand_in import llm_stand_in
from tests.integration.chat.stand_ins import TOKEN, fake_retrieval_app
from tests.integration.gateway.chat_stand_in import chat_stand_in, gateway_settings, login
from tests.integration.metrics_scrape import moved, scrape
from tests.support import serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration
QUESTION = {"query": "How do I add a user?"}
FAILURES = "cairn_stream_failures_total"


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[str, object]]:
    app, script = llm_stand_in()
    with serve_in_thread(app) as url:
        yield url, script


@pytest.fixture(scope="module")
def chat(model, redis_url) -> Iterator[str]:
    app, _ = fake_retrieval_app()
    with serve_in_thread(app) as retrieval_url:
        settings = ChatSettings(
            service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, llm_base_url=f"{model[0]}/v1",
            llm_model="test-model", llm_timeout_s=5, llm_max_retries=0, query_reformulation="off",
        )
        with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as url:
            yield url


@pytest.fixture(scope="module")
def dying_chat() -> Iterator[str]:
    with serve_in_thread(chat_stand_in(dies_mid_stream=True)) as url:
        yield url


def gateway_in_front_of(chat_url: str, redis_url: str, unique: str):
    return serve_in_thread(create_gateway_app(gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=chat_url, service_token=TOKEN, upstream_timeout_s=5
    )))


def last_event(text: str) -> tuple[str, dict]:
    block = [b for b in text.split("\n\n") if b.startswith("event:")][-1]
    fields = dict(line.split(": ", 1) for line in block.splitlines())
    return fields["event"], json.loads(fields["data"])


def test_a_model_failing_mid_answer_is_counted_by_chat_not_again_by_the_gateway(chat, model, redis_url, unique):
    model[1].reset(mode="broken_stream")
    with gateway_in_front_of(chat, redis_url, unique) as gateway, httpx.Client(base_url=gateway, timeout=30) as client:
        before_chat, before_gateway = scrape(chat), scrape(gateway)
        response = client.post("/api/chat/stream", json=QUESTION, headers=login(client))
        after_chat, after_gateway = scrape(chat), scrape(gateway)
    event, data = last_event(response.text)
    assert (response.status_code, event) == (200, "error"), response.text
    chat_labels = {"service": "chat", "route": "/chat/stream", "reason": data["error"]}
    assert moved(before_chat, after_chat, FAILURES, **chat_labels) == 1
    assert moved(before_gateway, after_gateway, FAILURES, service="gateway") == 0, "chat's own error event"


def test_a_finished_stream_counts_no_failure(chat, model, redis_url, unique):
    model[1].reset(mode="stream")
    before = scrape(chat)
    response = httpx.post(f"{chat}/chat/stream", json=QUESTION, headers={"X-Service-Token": TOKEN}, timeout=30)
    assert last_event(response.text)[0] == "done"
    assert moved(before, scrape(chat), FAILURES) == 0


def test_a_chat_dying_mid_stream_is_counted_by_the_gateway(dying_chat, redis_url, unique):
    with gateway_in_front_of(dying_chat, redis_url, unique) as gateway, httpx.Client(base_url=gateway) as client:
        before = scrape(gateway)
        response = client.post("/api/chat/stream", json=QUESTION, headers=login(client))
        after = scrape(gateway)
    # The error event's documented shape (docs/api.md), as chat's own: the status and Retry-After a plain answer
    # would have carried.
    assert response.status_code == 200 and last_event(response.text) == ("error", {
        "error": "chat_unavailable", "message": "chat is unavailable", "status": 503, "retry_after": "5"
    }), response.text
    labels = {"service": "gateway", "route": "/api/chat/stream", "reason": "chat_unavailable"}
    assert moved(before, after, FAILURES, **labels) == 1


def test_a_chat_dying_mid_completion_stream_is_counted_by_the_gateway(dying_chat, redis_url, unique):
    with gateway_in_front_of(dying_chat, redis_url, unique) as gateway, httpx.Client(base_url=gateway) as client:
        auth = login(client)
        before = scrape(gateway)
        response = client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "q"}], "stream": True}, headers=auth
        )
        after = scrape(gateway)
    data = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    assert response.status_code == 200 and json.loads(data[-2])["error"]["code"] == "chat_unavailable"
    labels = {"service": "gateway", "route": "/v1/chat/completions", "reason": "chat_unavailable"}
    assert moved(before, after, FAILURES, **labels) == 1
