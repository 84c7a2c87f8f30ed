import json
import logging

import httpx
import pytest
from prometheus_client import REGISTRY

from services.chat.adapters.generator import build_generator
from services.chat.context_format import ContextBlock
from services.chat.offline_llm.app import create_app
from services.chat.offline_llm.extractive import INSUFFICIENT, answer, split_sentences, stem
from services.chat.prompt import build_prompt
from services.chat.settings import Settings
from tests.unit.chat.fakes import GUIDE

pytestmark = pytest.mark.unit

BLOCKS = [
    ContextBlock(1, "Operations", "Redis keeps the login sessions. RabbitMQ carries events to analytics."),
    ContextBlock(
        2,
        "Users",
        "# Adding users\nTo add a user, run the cairn user add command. Passwords are hashed with argon2.",
    ),
]


def test_picks_the_relevant_sentence_and_cites_its_passage():
    text = answer("How do I add a user?", BLOCKS)
    assert text.startswith("To add a user, run the cairn user add command [2].")
    assert "Redis" not in text


def test_cites_sentences_from_several_passages():
    text = answer("Where are sessions and users kept? redis argon2 hashed", BLOCKS)
    assert "[1]" in text and "[2]" in text


def test_says_information_is_insufficient_when_nothing_overlaps():
    assert answer("What is the capital of Peru?", BLOCKS) == INSUFFICIENT
    assert answer("How do I add a user?", []) == INSUFFICIENT
    assert answer("the of and", BLOCKS) == INSUFFICIENT  # stopwords only


def test_sentence_splitting_skips_headings_and_code_and_keeps_list_items():
    text = (
        "# Title\nFirst sentence is here. Second one is\nwrapped onto two lines.\n```\ncode line not prose\n```\n"
        "- a list item that stands alone\n| a | table |\nAdding a us"
    )
    assert split_sentences(text) == [
        "First sentence is here.",
        "Second one is wrapped onto two lines.",
        "a list item that stands alone",
    ]  # "Adding a us": a short unpunctuated tail, likely cut by chunking


def test_a_sentence_repeating_a_better_one_is_left_out():
    blocks = [
        ContextBlock(1, "a", "To log out, call the logout route with the token."),
        ContextBlock(2, "b", "To log out, call the logout route. Tokens expire after a day."),
    ]
    text = answer("How do I log out with the logout route?", blocks)
    assert text.count("To log out") == 1


def test_stemming_joins_word_forms():
    assert stem("users") == stem("user")
    assert stem("adding") == "add"
    assert stem("queries") == "query"


async def test_endpoint_returns_an_openai_chat_completion():
    prompt = build_prompt(query="How do I add a user?", chunks=GUIDE, token_budget=3500)
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://offline") as client:
        response = await client.post("/v1/chat/completions", json={"model": "m1", "messages": prompt.messages})
        models = await client.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "m1" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "stop"
    assert "cairn user add" in choice["message"]["content"] and "[1]" in choice["message"]["content"]
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert models.json()["data"][0]["id"] == "cairn-extractive"


async def test_endpoint_honours_max_tokens_and_streams_word_deltas():
    prompt = build_prompt(query="How do I add a user?", chunks=GUIDE, token_budget=3500)
    transport = httpx.ASGITransport(app=create_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://offline") as client:
        short = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": prompt.messages, "max_tokens": 3}
        )
        whole = await client.post("/v1/chat/completions", json={"model": "m", "messages": prompt.messages})
        stream = await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": prompt.messages, "stream": True, "stream_options": {"include_usage": True}},
        )
        empty = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
    assert short.json()["choices"][0]["finish_reason"] == "length"
    assert len(short.json()["choices"][0]["message"]["content"].split()) == 3
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    lines = [line.removeprefix("data: ") for line in stream.text.split("\n\n") if line]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    words = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert "".join(words) == whole.json()["choices"][0]["message"]["content"] and len(words) > 5
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole.json()["usage"]
    assert empty.status_code == 422


async def test_the_sdk_talks_to_it_in_process():
    generator = build_generator(Settings())
    try:
        prompt = build_prompt(query="How do I add a user?", chunks=GUIDE, token_budget=3500)
        result = await generator.generate(model="cairn-extractive", messages=prompt.messages, temperature=0.1, max_tokens=512)
        assert "cairn user add" in result.text and "[1]" in result.text
        assert result.model == "cairn-extractive" and result.finish_reason == "stop"
        assert result.prompt_tokens > 0 and result.completion_tokens > 0
        assert await generator.ping()
    finally:
        await generator.close()



async def test_in_process_it_writes_no_request_line_and_no_metrics_of_its_own(caplog):
    """It is part of chat's request, which chat logs and counts once."""
    caplog.set_level(logging.INFO)
    before = REGISTRY.get_sample_value(
        "cairn_http_requests_total", {"service": "offline-llm", "method": "POST", "route": "/v1/chat/completions", "status": "200"}
    )
    generator = build_generator(Settings())
    try:
        prompt = build_prompt(query="How do I add a user?", chunks=GUIDE, token_budget=3500)
        await generator.generate(model="cairn-extractive", messages=prompt.messages, temperature=0.1, max_tokens=64)
    finally:
        await generator.close()
    assert not [r for r in caplog.records if r.getMessage() == "request"]
    after = REGISTRY.get_sample_value(
        "cairn_http_requests_total", {"service": "offline-llm", "method": "POST", "route": "/v1/chat/completions", "status": "200"}
    )
    assert after == before
