"""Contextual chunking end to end: the retrieval app, the real model and Chroma, and a local
OpenAI-compatible server (over real HTTP, through the openai SDK) that writes deterministic prefixes."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration

TOKEN = "contextual-token"
AUTH = {"X-Service-Token": TOKEN}
MANUAL = """# Lighthouse keeper's handbook

## Lamp

Clean the lens every morning and trim the wick before dusk.

## Fog signal

Sound the horn twice a minute while visibility stays under one mile.
"""
FOG = "## Fog signal\n\nSound the horn twice a minute while visibility stays under one mile."


@dataclass
class LLMState:
    calls: int = 0
    fail: bool = False
    malformed: Response | None = None  # answered instead of a chat completion
    delay_s: float = 0.0  # before answering


def _llm_app(state: LLMState) -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/v1/chat/completions")
    async def complete(request: Request):
        body = await request.json()
        state.calls += 1
        await asyncio.sleep(state.delay_s)
        if state.fail:
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=500)
        if state.malformed is not None:
            return state.malformed
        chunk = body["messages"][-1]["content"].split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]
        topic = "the fog horn" if "horn" in chunk else "the lamp"
        answer = f"From the lighthouse keeper's handbook, on {topic} (seamanship)."
        return {
            "id": f"cmpl-{state.calls}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }

    return app


@pytest.fixture
def llm() -> Iterator[tuple[str, LLMState]]:
    state = LLMState()
    with serve_in_thread(_llm_app(state)) as url:
        yield url, state


@pytest.fixture
def client(tmp_path: Path, llm, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    url, _ = llm
    with TestClient(create_app(_settings(tmp_path, url), embedder=embedder)) as client:
        yield client


def _settings(tmp_path: Path, llm_url: str, **overrides) -> Settings:
    chosen = {
        "service_token": TOKEN,
        "data_dir": tmp_path / "data",
        "contextual_chunks": True,
        "llm_base_url": f"{llm_url}/v1",
        "llm_model": "ctx-model",
        "contextual_max_retries": 0,
        "chunk_size_tokens": 32,
        "chunk_overlap_tokens": 0,
    }
    return Settings(**(chosen | overrides))


def _dense(client: TestClient, query: str, **filters: str) -> dict:
    body = {"query": query, "top_k": 1, "mode": "dense", "filters": filters or None}
    response = client.post("/search", json=body, headers=AUTH)
    assert response.status_code == 200, response.text
    return response.json()["results"][0]


def test_prefixes_are_embedded_cached_and_kept_out_of_the_content(client: TestClient, llm) -> None:
    _, state = llm
    tokens_before = {kind: llm_tokens(kind) for kind in ("prompt", "completion")}
    added = client.post("/documents", json={"text": MANUAL, "doc_id": "handbook.md"}, headers=AUTH).json()
    assert added["status"] == "added" and state.calls == added["chunks"] == 2
    # Every call's usage is metered: 10 prompt and 10 completion tokens each, as the test endpoint reports.
    assert {kind: llm_tokens(kind) - before for kind, before in tokens_before.items()} == {"prompt": 20, "completion": 20}
    assert client.get("/documents/handbook.md", headers=AUTH).json()["context_model"] == "ctx-model"

    situated = _dense(client, f"From the lighthouse keeper's handbook, on the fog horn (seamanship).\n\n{FOG}")
    assert situated["content"] == FOG, "users get the chunk, not the prefix"
    assert situated["dense_score"] > 0.995, "what was embedded is the prefix followed by the chunk"
    assert _dense(client, FOG)["dense_score"] < situated["dense_score"] - 0.01

    keyword = client.post("/search", json={"query": "seamanship", "mode": "keyword"}, headers=AUTH).json()["results"]
    assert len(keyword) == 2, "the prefix is keyword-indexed too"
    assert all("seamanship" not in hit["content"] for hit in keyword)

    assert client.post("/documents", json={"text": MANUAL, "doc_id": "handbook.md"}, headers=AUTH).json()["status"] == "unchanged"
    client.delete("/documents/handbook.md", headers=AUTH)
    again = client.post("/documents", json={"text": MANUAL, "doc_id": "handbook.md"}, headers=AUTH).json()
    assert again["status"] == "added" and state.calls == 2, "prefixes come from the cache: no second call"


def llm_tokens(kind: str) -> float:
    return REGISTRY.get_sample_value("cairn_retrieval_llm_tokens_total", {"model": "ctx-model", "kind": kind}) or 0.0


def llm_failures() -> float:
    return REGISTRY.get_sample_value("cairn_retrieval_llm_failures_total", {"reason": "500"}) or 0.0


def test_a_failing_endpoint_never_fails_an_ingest(client: TestClient, llm) -> None:
    _, state = llm
    state.fail = True
    failures_before, calls_before = llm_failures(), state.calls
    added = client.post("/documents", json={"text": MANUAL, "doc_id": "down.md"}, headers=AUTH)
    assert added.status_code == 200 and added.json()["chunks"] == 2
    assert llm_failures() - failures_before == state.calls - calls_before >= 1, "each failed call is counted"
    assert client.get("/documents/down.md", headers=AUTH).json()["context_model"] is None
    assert _dense(client, FOG, doc_id="down.md")["dense_score"] > 0.995, "indexed without a prefix"

    assert client.post("/search", json={"query": "seamanship", "mode": "keyword"}, headers=AUTH).json()["results"] == []

    state.fail = False
    healed = client.post("/documents", json={"text": MANUAL, "doc_id": "down.md"}, headers=AUTH).json()
    assert healed["status"] == "replaced", "an incompletely situated document is re-done on its next ingest"
    assert client.get("/documents/down.md", headers=AUTH).json()["context_model"] == "ctx-model"



def test_a_slow_endpoint_holds_an_ingest_up_only_until_the_deadline(tmp_path: Path, llm, embedder) -> None:
    url, state = llm
    state.delay_s = 8.0
    settings = _settings(tmp_path, url, contextual_deadline_s=1.0, contextual_timeout_s=30.0)
    with TestClient(create_app(settings, embedder=embedder)) as client:
        started = time.monotonic()
        added = client.post("/documents", json={"text": MANUAL, "doc_id": "slow.md"}, headers=AUTH)
        assert added.status_code == 200 and added.json()["chunks"] == 2, added.text
        assert time.monotonic() - started < 6, "not the 8 seconds the model takes"
        assert client.get("/documents/slow.md", headers=AUTH).json()["context_model"] is None

        state.delay_s = 0.0
        healed = client.post("/documents", json={"text": MANUAL, "doc_id": "slow.md"}, headers=AUTH).json()
        assert healed["status"] == "replaced"
        assert client.get("/documents/slow.md", headers=AUTH).json()["context_model"] == "ctx-model"

MALFORMED = {
    "plain text": PlainTextResponse("upstream proxy says hello"),
    "broken json": PlainTextResponse('{"choices": [', media_type="application/json"),
    "a choice without a message": JSONResponse({"choices": [{"index": 0, "finish_reason": "stop"}]}),
    "a null choice": JSONResponse({"choices": [None]}),
    "content that is not text": JSONResponse({"choices": [{"index": 0, "message": {"role": "assistant", "content": ["x"]}}]}),
}


@pytest.mark.parametrize("answer", MALFORMED.values(), ids=MALFORMED.keys())
def test_an_answer_that_is_not_a_chat_completion_never_fails_an_ingest(client: TestClient, llm, answer: Response) -> None:
    _, state = llm
    state.malformed = answer
    invalid_before = REGISTRY.get_sample_value("cairn_retrieval_llm_failures_total", {"reason": "invalid_response"}) or 0.0
    added = client.post("/documents", json={"text": MANUAL, "doc_id": "odd.md"}, headers=AUTH)
    assert added.status_code == 200, added.text
    assert client.get("/documents/odd.md", headers=AUTH).json()["context_model"] is None
    invalid = REGISTRY.get_sample_value("cairn_retrieval_llm_failures_total", {"reason": "invalid_response"}) or 0.0
    assert invalid - invalid_before == state.calls >= 1, "each unreadable answer is counted"


def test_unreadable_token_usage_still_gives_the_prefix(client: TestClient, llm) -> None:
    _, state = llm
    answer = {"index": 0, "message": {"role": "assistant", "content": "On the fog horn."}, "finish_reason": "stop"}
    state.malformed = JSONResponse({"choices": [answer], "usage": {"prompt_tokens": None, "completion_tokens": "many"}})
    added = client.post("/documents", json={"text": MANUAL, "doc_id": "usage.md"}, headers=AUTH)
    assert added.status_code == 200, added.text
    assert client.get("/documents/usage.md", headers=AUTH).json()["context_model"] == "ctx-model"
