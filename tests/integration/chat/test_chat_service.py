"""The real chat app over HTTP, against the real retrieval app (MiniLM, embedded Chroma) over HTTP, an
OpenAI-compatible stand-in model and the real Redis: answers, LLM faults, streaming, follow-ups."""
from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator

import httpx
import pytest

from services.chat.answering import CONTENT_FILTERED, CUT_OFF, FILTERED_REST, LENGTH_REACHED
from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.retrieval.main import create_app as create_retrieval_app
from services.retrieval.settings import Settings as RetrievalSettings
from shared.logging import json_handler
from tests.integration.chat.llm_stand_in import CONTEXT_OVERFLOW
from tests.integration.chat.stand_ins import HEADERS, TOKEN
from tests.support import free_port, serve_in_thread, wait_until
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration

SESSIONS = """# Sessions

## Storage

Login sessions are stored in Redis. Redis keeps only the SHA-256 hash of each token.

## Lifetime

A session expires after 24 hours without use. Set SESSION_TTL_SECONDS on the gateway to change the TTL of login sessions.
"""
USERS = """# Users

## Adding a user

Run `cairn user add NAME --role user` to add a user. The password is read from a prompt.
"""


@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory, embedder) -> Iterator[str]:
    settings = RetrievalSettings(
        service_token=TOKEN, data_dir=tmp_path_factory.mktemp("retrieval"), chroma_collection="chat-service-test"
    )
    with serve_in_thread(create_retrieval_app(settings, embedder=embedder)) as url:
        for source, text in (("guide/sessions.md", SESSIONS), ("guide/users.md", USERS)):
            added = httpx.post(
                f"{url}/documents", json={"text": text, "source": source, "category": "guide"}, headers=HEADERS
            )
            assert added.status_code == 200, added.text
        yield url


@pytest.fixture(scope="module")
def chat(retrieval_url, model, redis_url) -> Iterator[tuple[str, ListPublisher]]:
    publisher = ListPublisher()
    settings = ChatSettings(
        service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url,
        llm_base_url=f"{model[0]}/v1", llm_model="test-model", llm_timeout_s=0.5, llm_max_retries=2,
        llm_backoff_base_s=0.05, llm_backoff_cap_s=2.0, query_reformulation="off",
    )
    with serve_in_thread(create_chat_app(settings, publisher=publisher)) as url:
        yield url, publisher


def ask(chat_url: str, query: str = "How do I add a user?", **extra) -> httpx.Response:
    return httpx.post(f"{chat_url}/chat", json={"query": query, **extra}, headers=HEADERS, timeout=30)


def sse_events(response: httpx.Response) -> list[tuple[str, dict]]:
    events = []
    for block in response.text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_cited_grounded_answer_from_the_model(chat, script):
    script.reset(text="Run `cairn user add NAME --role user` to add a user [1].")
    response = ask(chat[0])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answer"] == script.text
    citation = body["citations"][0]
    assert (citation["n"], citation["doc_id"], citation["section"]) == (1, "guide/users.md", "Adding a user")
    assert citation["support"]["verdict"] == "supported"
    assert body["grounding"]["supported"] == 1 and body["grounding"]["unsupported"] == 0
    assert body["metadata"]["model"] == "test-model" and body["metadata"]["kind"] == "answer"
    assert body["confidence"]["level"] in ("High", "Medium")
    assert {d["category"] for d in body["related_docs"]} == {"guide"}
    sent = script.calls[0].body
    assert sent["model"] == "test-model" and "[1] Users > Adding a user" in sent["messages"][0]["content"]


def test_rate_limit_is_retried_after_the_servers_delay(chat, script):
    script.reset(mode="rate_limit", failures=1, retry_after="1")
    response = ask(chat[0])
    assert response.status_code == 200, response.text
    assert len(script.calls) == 2 and script.calls[1].at - script.calls[0].at >= 0.95


def test_a_model_that_keeps_failing_gives_502_and_query_failed(chat, script):
    publisher = chat[1]
    script.reset(mode="error")
    response = ask(chat[0])
    assert response.status_code == 502 and response.json()["error"] == "llm_unavailable"
    assert len(script.calls) == 3  # the first call and LLM_MAX_RETRIES=2 retries
    failed = publisher.events[-1]
    assert failed.event_type == "QueryFailed"
    assert (failed.data.stage, failed.data.error, failed.data.error_type) == ("generation", "llm_unavailable", "LLMUnavailable")


def test_a_client_error_is_not_retried(chat, script):
    script.reset(mode="bad_request")
    assert ask(chat[0]).status_code == 502
    assert len(script.calls) == 1


def test_a_model_that_keeps_rate_limiting_gives_503_with_its_retry_after(chat, script):
    script.reset(mode="rate_limit", retry_after="0.2")
    response = ask(chat[0])
    assert response.status_code == 503 and response.json()["error"] == "llm_unavailable", response.text
    assert response.headers["retry-after"] == "1"  # the model's 0.2 s, in the whole seconds HTTP allows
    assert "429" in response.json()["message"] and len(script.calls) == 3


def test_a_retry_after_over_the_backoff_cap_gives_503_at_once_with_it(chat, script):
    script.reset(mode="rate_limit", retry_after="60")  # LLM_BACKOFF_CAP_S is 2 here
    started = time.monotonic()
    response = ask(chat[0])
    assert response.status_code == 503 and response.json()["error"] == "llm_unavailable", response.text
    assert response.headers["retry-after"] == "60" and len(script.calls) == 1
    assert time.monotonic() - started < 2.0


def test_an_answer_cut_off_at_the_token_limit_says_so_streamed_or_not(chat, script):
    # Shown as if complete before, even mid-sentence inside a code block, with a High confidence.
    cut = "Run this to add a user [1]:\n\n```\ncairn user add NAME --ro"
    script.reset(text=cut, finish_reason="length")
    body = ask(chat[0]).json()
    assert body["answer"] == f"{cut}\n```\n\n{CUT_OFF}"  # the open code block closed before the note
    assert (body["metadata"]["kind"], body["metadata"]["finish_reason"]) == ("answer", "length")
    assert [c["n"] for c in body["citations"]] == [1]
    with httpx.stream("POST", f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS) as r:
        r.read()
    events = sse_events(r)
    assert "".join(data["text"] for name, data in events if name == "token") == cut
    assert events[-1][0] == "done" and events[-1][1]["answer"] == body["answer"]


THINKING = "<think>The user asks how to add a user. Passage [1] says to run"


@pytest.mark.parametrize(
    ("scripted", "finish_reason", "said", "streamed"),
    [
        ({"mode": "content_filter"}, "content_filter", CONTENT_FILTERED, CONTENT_FILTERED),
        ({"text": THINKING, "finish_reason": "length"}, "length", LENGTH_REACHED, THINKING),
    ],
    ids=["content filter", "token limit"],
)
def test_an_uncited_answer_the_model_was_stopped_in_says_why_not_that_nothing_was_found(
    chat, script, scripted, finish_reason, said, streamed
):
    # The model's content filter, or LLM_MAX_TOKENS spent thinking (a reasoning model on vLLM, Ollama or
    # llama.cpp): the documents may hold the answer, and "I couldn't find relevant information" would say not.
    publisher = chat[1]
    script.reset(**scripted)
    body = ask(chat[0]).json()
    assert body["answer"] == said and "couldn't find" not in body["answer"]
    assert (body["metadata"]["kind"], body["metadata"]["finish_reason"]) == ("no_information", finish_reason)
    generated = publisher.events[-1]
    assert generated.event_type == "ResponseGenerated" and generated.data.finish_reason == finish_reason
    with httpx.stream("POST", f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS) as r:
        r.read()
    events = sse_events(r)
    assert "".join(data["text"] for name, data in events if name == "token") == streamed
    assert events[-1][0] == "done" and events[-1][1]["answer"] == said


def test_an_answer_the_content_filter_cut_short_says_so_streamed_or_not(chat, script):
    # Shown as if complete before: the filter withheld the rest after the model had written some of it.
    cut = "Run this to add a user [1]:\n\n```\ncairn user add NAME"
    script.reset(text=cut, finish_reason="content_filter")
    body = ask(chat[0]).json()
    assert body["answer"] == f"{cut}\n```\n\n{FILTERED_REST}"
    assert (body["metadata"]["kind"], body["metadata"]["finish_reason"]) == ("answer", "content_filter")
    with httpx.stream("POST", f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS) as r:
        r.read()
    events = sse_events(r)
    assert events[-1][0] == "done" and events[-1][1]["answer"] == body["answer"]


def test_a_prompt_the_content_filter_refused_gives_422_llm_content_filtered(chat, script):
    publisher = chat[1]
    script.reset(mode="prompt_filtered")
    response = ask(chat[0])
    assert response.status_code == 422 and response.json()["error"] == "llm_content_filtered", response.text
    assert "content filter" in response.json()["message"] and len(script.calls) == 1
    failed = publisher.events[-1]
    assert (failed.event_type, failed.data.error) == ("QueryFailed", "llm_content_filtered")


def test_a_refused_api_key_is_named_not_retried_and_shown_in_readiness(chat, script):
    script.reset(mode="unauthorized")
    response = ask(chat[0])
    assert response.status_code == 502 and response.json()["error"] == "llm_unavailable"
    assert "LLM_API_KEY" in response.json()["message"] and len(script.calls) == 1
    ready = httpx.get(f"{chat[0]}/readyz", timeout=10).json()
    assert ready["checks"]["llm"] is False and ready["status"] == "ready"  # reported, as the model is not needed


def asked_once(chat_url: str, script, query: str) -> tuple[dict, int]:
    """The answer when the model takes any prompt, and the characters of the prompt it was sent."""
    script.reset(text="Run `cairn user add NAME --role user` to add a user [1].")
    body = ask(chat_url, query).json()
    return body, sum(len(m["content"]) for m in script.calls[0].body["messages"])


BOTH_DOCUMENTS = "How do I add a user, and how long does a login session last?"


def test_a_prompt_over_the_context_window_is_answered_from_fewer_passages(chat, script):
    whole, prompt_chars = asked_once(chat[0], script, BOTH_DOCUMENTS)
    assert whole["metadata"]["chunks_used"] >= 2
    script.reset(mode="small_context", context_chars=prompt_chars - 1, text="Run `cairn user add NAME` [1].")
    response = ask(chat[0], BOTH_DOCUMENTS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["metadata"]["kind"] == "answer" and len(script.calls) == 2
    sent = [sum(len(m["content"]) for m in call.body["messages"]) for call in script.calls]
    assert sent[0] == prompt_chars and sent[1] < prompt_chars
    assert body["metadata"]["chunks_used"] <= whole["metadata"]["chunks_used"]

    script.reset(mode="small_context", context_chars=prompt_chars - 1, text="Run `cairn user add NAME` [1].")
    with httpx.stream("POST", f"{chat[0]}/chat/stream", json={"query": BOTH_DOCUMENTS}, headers=HEADERS) as r:
        r.read()
    events = sse_events(r)
    assert [events[0][0], events[-1][0]] == ["sources", "done"], events[-1]
    done = events[-1][1]
    assert done["metadata"]["chunks_used"] <= len(events[0][1]["sources"]) and len(script.calls) == 2


def test_a_prompt_that_never_fits_the_context_window_names_the_settings(chat, script):
    publisher = chat[1]
    script.reset(mode="small_context", context_chars=10)
    response = ask(chat[0], BOTH_DOCUMENTS)
    assert response.status_code == 500, response.text
    assert response.json()["error"] == "llm_context_exceeded"
    # asked again with half the passages' text, then a quarter, unless no passage would be left
    assert "CONTEXT_TOKEN_BUDGET" in response.json()["message"] and 2 <= len(script.calls) <= 3
    assert publisher.events[-1].data.error == "llm_context_exceeded"
    script.reset(mode="small_context", context_chars=10)
    streamed = httpx.post(f"{chat[0]}/chat/stream", json={"query": BOTH_DOCUMENTS}, headers=HEADERS, timeout=30)
    assert sse_events(streamed)[-1] == ("error", {**response.json(), "status": 500})  # the plain endpoint's body and status


def test_a_context_overflow_answered_with_200_takes_the_path_of_its_400(chat, script):
    # A proxy (LiteLLM, say) that relays vLLM's refusal as 200 {"error": ...}: asked again with fewer passages.
    script.reset(mode="error_in_200", answered_error=CONTEXT_OVERFLOW)
    response = ask(chat[0], BOTH_DOCUMENTS)
    assert response.status_code == 500 and response.json()["error"] == "llm_context_exceeded", response.text
    assert 2 <= len(script.calls) <= 3
    script.reset(mode="error_in_200", answered_error=CONTEXT_OVERFLOW)
    streamed = httpx.post(f"{chat[0]}/chat/stream", json={"query": BOTH_DOCUMENTS}, headers=HEADERS, timeout=30)
    assert sse_events(streamed)[-1] == ("error", {**response.json(), "status": 500})
    assert 2 <= len(script.calls) <= 3


def test_a_hanging_model_times_out_within_the_bound(chat, script):
    script.reset(mode="hang", hang_s=10.0)  # one attempt left to the hang would pass the bound below
    started = time.monotonic()
    response = ask(chat[0])
    assert response.status_code == 502 and response.json()["error"] == "llm_unavailable"
    assert time.monotonic() - started < 3 * 0.5 + 3.5  # three attempts of LLM_TIMEOUT_S, backoff, a slow busy machine


def test_an_answer_without_citations_is_replaced_by_the_fallback(chat, script):
    script.reset(mode="no_citations")
    body = ask(chat[0]).json()
    assert body["metadata"]["kind"] == "no_information" and body["citations"] == []
    assert "couldn't find relevant information" in body["answer"]
    assert body["confidence"]["level"] == "Low"


def test_small_talk_asks_neither_retrieval_nor_the_model(chat, script):
    body = ask(chat[0], "Hello!").json()
    assert body["metadata"]["kind"] == "small_talk" and body["metadata"]["model"] is None
    assert body["confidence"] == {"level": "Low", "score": 0.0, "reason": body["confidence"]["reason"]}
    assert script.calls == [] and body["metadata"]["chunks_retrieved"] == 0


def test_stream_sends_sources_then_tokens_then_done(chat, script):
    script.reset(mode="stream", text="Run `cairn user add NAME --role user` to add a user [1].")
    with httpx.stream("POST", f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        r.read()
    events = sse_events(r)
    names = [name for name, _ in events]
    assert names[0] == "sources" and names[-1] == "done" and set(names[1:-1]) == {"token"}
    assert len(names) > 5  # word by word, as the model wrote it
    assert "".join(data["text"] for name, data in events if name == "token") == script.text
    assert events[0][1]["sources"][0]["n"] == 1
    done = events[-1][1]
    assert done["answer"] == script.text and done["citations"][0]["doc_id"] == "guide/users.md"


def test_a_stream_that_breaks_ends_with_an_error_event(chat, script):
    script.reset(mode="broken_stream")
    response = httpx.post(f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)
    names = [name for name, _ in sse_events(response)]
    assert names[0] == "sources" and names[-1] == "error"
    assert sse_events(response)[-1][1]["error"] == "llm_unavailable"


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """The JSON log lines the services write while the test runs."""
    logs = io.StringIO()
    handler = json_handler("test", logs)
    logging.getLogger().addHandler(handler)
    try:
        yield logs
    finally:
        logging.getLogger().removeHandler(handler)


def test_a_failed_stream_is_logged_with_its_request_id_like_a_failed_answer(chat, script, json_logs):
    script.reset(mode="broken_stream")
    plain = httpx.post(
        f"{chat[0]}/chat", json={"query": "How do I add a user?"}, headers={**HEADERS, "X-Request-ID": "failed-plain"},
        timeout=30,
    )
    script.reset(mode="broken_stream")
    streamed = httpx.post(
        f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"},
        headers={**HEADERS, "X-Request-ID": "failed-stream"}, timeout=30,
    )
    assert plain.status_code == 502 and sse_events(streamed)[-1][1]["error"] == "llm_unavailable"

    lines = [json.loads(line) for line in json_logs.getvalue().splitlines()]
    failures = {line["request_id"]: line for line in lines if line["message"] == "request failed"}
    for request_id in ("failed-plain", "failed-stream"):  # the stream's request line says 200: this line tells
        assert failures[request_id]["level"] == "WARNING" and failures[request_id]["error"] == "llm_unavailable"


# A wrong LLM_BASE_URL answers 200 with something that is not a completion: the operator must hear of it.
MISCONFIGURED = {"html": "text/html", "wrong_json": "application/json", "broken_json": "application/json"}


@pytest.mark.parametrize("mode", MISCONFIGURED)
def test_an_endpoint_that_is_not_a_model_gives_502_naming_the_setting(chat, script, mode):
    publisher = chat[1]
    script.reset(mode=mode)
    response = ask(chat[0])
    assert response.status_code == 502, response.text
    assert response.json() == {
        "error": "llm_unavailable",
        "message": f"the model endpoint answered 200 with {MISCONFIGURED[mode]}, not a chat completion: "
        "check LLM_BASE_URL",
    }
    assert len(script.calls) == 1  # not retried: the same URL serves the same page
    failed = publisher.events[-1]
    assert (failed.event_type, failed.data.stage, failed.data.error) == ("QueryFailed", "generation", "llm_unavailable")


@pytest.mark.parametrize("mode", [*MISCONFIGURED, "wrong_chunks"])
def test_a_stream_from_an_endpoint_that_is_not_a_model_ends_with_an_error_event(chat, script, mode):
    script.reset(mode=mode)
    response = httpx.post(f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)
    assert response.status_code == 200  # the sources event was sent before the model was asked
    events = sse_events(response)
    assert [name for name, _ in events] == ["sources", "error"]
    content_type = MISCONFIGURED.get(mode, "text/event-stream")
    assert events[-1][1] == {
        "error": "llm_unavailable",
        "message": f"the model endpoint answered 200 with {content_type}, not a stream of chat completion chunks: "
        "check LLM_BASE_URL",
        "status": 502,
    }
    assert len(script.calls) == 1


def test_errors_before_the_stream_are_plain_json(chat, script):
    response = httpx.post(
        f"{chat[0]}/chat/stream", json={"query": "q", "model_id": "nope"}, headers=HEADERS, timeout=30
    )
    assert response.status_code == 422 and response.json()["error"] == "unknown_model"


def test_a_client_that_disconnects_cancels_generation(chat, script):
    publisher = chat[1]
    script.reset(mode="slow_stream", slow_chunks=200, slow_delay_s=0.05)
    with httpx.stream("POST", f"{chat[0]}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS) as r:
        lines = r.iter_lines()
        while "event: token" not in next(lines):
            pass
    assert script.disconnected.wait(5), "the model kept generating after the client left"
    assert not script.finished.is_set()
    wait_until(lambda: publisher.events[-1].event_type == "QueryFailed", timeout=5, what="QueryFailed")
    assert publisher.events[-1].data.error == "client_disconnected"


def test_a_follow_up_is_rewritten_by_the_model_and_owned_by_its_user(retrieval_url, model, redis_url, unique):
    url, script = model
    script.reset(text="Login sessions are stored in Redis [1].")
    settings = ChatSettings(
        service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, llm_base_url=f"{url}/v1",
        llm_model="test-model", llm_backoff_base_s=0.05,
    )
    with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as chat_url:
        first = ask(chat_url, "How are login sessions stored?", conversation_id=unique).json()
        assert first["conversation_id"] == unique and len(script.calls) == 1  # no history: no rewrite
        script.reset(text="What is the TTL of login sessions?")  # the model's rewrite, then its answer
        follow_up = ask(chat_url, "and what about its TTL?", conversation_id=unique)
        assert follow_up.status_code == 200, follow_up.text
        assert follow_up.json()["metadata"]["reformulated_query"] == "What is the TTL of login sessions?"
        rewrite_prompt = json.dumps(script.calls[0].body["messages"])
        assert "How are login sessions stored?" in rewrite_prompt and "and what about its TTL?" in rewrite_prompt
        stranger = httpx.post(
            f"{chat_url}/chat", json={"query": "and then?", "conversation_id": unique},
            headers={**HEADERS, "X-User-Id": "someone-else"}, timeout=30,
        )
        assert stranger.status_code == 404 and stranger.json()["error"] == "conversation_not_found"
        # A stream says it before its first event, as plain JSON (docs/api.md).
        streamed = httpx.post(
            f"{chat_url}/chat/stream", json={"query": "and then?", "conversation_id": unique},
            headers={**HEADERS, "X-User-Id": "someone-else"}, timeout=30,
        )
        assert streamed.status_code == 404 and streamed.headers["content-type"].startswith("application/json")
        assert streamed.json()["error"] == "conversation_not_found"


def test_redis_down_fails_follow_ups_with_503_but_not_new_questions(retrieval_url, model, unique):
    url, script = model
    script.reset()
    settings = ChatSettings(
        service_token=TOKEN, retrieval_url=retrieval_url, redis_url="redis://127.0.0.1:1/0", redis_timeout_s=0.5,
        llm_base_url=f"{url}/v1", llm_model="test-model",
    )
    with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as chat_url:
        assert ask(chat_url).status_code == 200
        follow_up = ask(chat_url, "and then?", conversation_id=unique)
        assert follow_up.status_code == 503 and follow_up.json()["error"] == "conversation_store_unavailable"
        streamed = httpx.post(
            f"{chat_url}/chat/stream", json={"query": "and then?", "conversation_id": unique}, headers=HEADERS, timeout=30
        )
        assert streamed.status_code == 503 and streamed.headers["content-type"].startswith("application/json")
        assert streamed.json()["error"] == "conversation_store_unavailable"


def test_retrieval_going_down_gives_503_within_the_timeout_and_recovers(tmp_path, embedder, model, unique):
    url, script = model
    script.reset()
    settings = RetrievalSettings(service_token=TOKEN, data_dir=tmp_path, chroma_collection=unique)
    port = free_port()
    chat_settings = ChatSettings(
        service_token=TOKEN, retrieval_url=f"http://127.0.0.1:{port}", retrieval_timeout_s=2.0,
        retrieval_backoff_s=0.05, retrieval_breaker_cooldown_s=0.5, llm_base_url=f"{url}/v1", llm_model="test-model",
    )
    with serve_in_thread(create_chat_app(chat_settings, publisher=ListPublisher())) as chat_url:
        with serve_in_thread(create_retrieval_app(settings, embedder=embedder), port=port) as retrieval:
            httpx.post(f"{retrieval}/documents", json={"text": USERS, "source": "guide/users.md"}, headers=HEADERS)
            assert ask(chat_url).status_code == 200
        started = time.monotonic()
        down = ask(chat_url)
        assert down.status_code == 503 and down.json()["error"] == "retrieval_unavailable"
        assert time.monotonic() - started < 2.0 + 1.0
        with serve_in_thread(create_retrieval_app(settings, embedder=embedder), port=port):
            wait_until(lambda: ask(chat_url).status_code == 200, timeout=10, what="chat to reach retrieval again")
