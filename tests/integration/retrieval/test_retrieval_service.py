"""The retrieval app with the real MiniLM model and real Chroma, over its HTTP API."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.chunking import chunk_text
from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.integration.retrieval.chroma_server import ChromaServer
from tests.support import wait_until

pytestmark = pytest.mark.integration

TOKEN = "integration-token"
AUTH = {"X-Service-Token": TOKEN}
REPO = Path(__file__).resolve().parents[3]

OPERATIONS = """# Operations

How to run Cairn day to day.

## Starting

Run `make up` in the repository. It starts the gateway, chat, retrieval and analytics services.

## Stopping

Press Ctrl-C in the shell running cairn up, or run `cairn down` from another shell.
"""

USERS = """# Users

## Adding a user

An administrator creates accounts with `cairn user add NAME --role user`. The password is read from a prompt.

## Roles

Analysts may read the analytics dashboard; admins may also manage documents.
"""


def settings_for(tmp_path: Path, **overrides) -> Settings:
    return Settings(service_token=TOKEN, data_dir=tmp_path, chroma_collection="cairn-test", **overrides)


@pytest.fixture
def client(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    with TestClient(create_app(settings_for(tmp_path), embedder=embedder)) as client:
        for source, text in (("guide/operations.md", OPERATIONS), ("guide/users.md", USERS)):
            response = client.post("/documents", json={"text": text, "source": source, "category": "guide"}, headers=AUTH)
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "added"
        yield client


def test_search_finds_the_right_document_first_with_its_metadata(client: TestClient) -> None:
    response = client.post("/search", json={"query": "How do I add a user?", "top_k": 3}, headers=AUTH)
    assert response.status_code == 200
    body = response.json()
    top = body["results"][0]
    assert top["doc_id"] == "guide/users.md"
    assert top["chunk_id"] == f"guide/users.md#{top['metadata']['chunk_index']}"
    assert top["metadata"]["title"] == "Users" and top["metadata"]["section"] == "Adding a user"
    assert top["metadata"]["category"] == "guide" and top["metadata"]["source"] == "guide/users.md"
    assert USERS[top["metadata"]["char_start"] : top["metadata"]["char_end"]] == top["content"]
    assert 0.3 < top["dense_score"] <= 1 and top["dense_rank"] == 1 and top["keyword_rank"] == 1  # hybrid by default
    scores = [r["score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)

    stopping = client.post("/search", json={"query": "how do I stop cairn"}, headers=AUTH).json()["results"][0]
    assert stopping["metadata"]["section"] == "Stopping"


def test_threshold_and_filters(client: TestClient) -> None:
    strict = client.post("/search", json={"query": "How do I add a user?", "threshold": 0.99}, headers=AUTH).json()
    assert strict["results"] == []
    only_ops = client.post(
        "/search", json={"query": "How do I add a user?", "filters": {"doc_id": "guide/operations.md"}}, headers=AUTH
    ).json()
    assert only_ops["results"] and {r["doc_id"] for r in only_ops["results"]} == {"guide/operations.md"}


def test_reingesting_is_a_no_op_and_a_change_replaces(client: TestClient) -> None:
    same = client.post("/documents", json={"text": USERS, "source": "guide/users.md", "category": "guide"}, headers=AUTH)
    assert same.json()["status"] == "unchanged"

    changed = "# Users\n\nAccounts are now managed by single sign-on."
    replaced = client.post("/documents", json={"text": changed, "source": "guide/users.md", "category": "guide"}, headers=AUTH)
    assert replaced.json() == {"doc_id": "guide/users.md", "title": "Users", "status": "replaced", "chunks": 1}
    documents = {d["doc_id"]: d for d in client.get("/documents", headers=AUTH).json()["documents"]}
    assert documents["guide/users.md"]["chunks"] == 1
    hits = client.post("/search", json={"query": "add a user with a role", "top_k": 10}, headers=AUTH).json()["results"]
    assert all("cairn user add" not in r["content"] for r in hits), "the old chunks are gone"


def test_a_field_changed_from_a_number_to_a_boolean_replaces_the_document(client: TestClient) -> None:
    """True == 1 in Python, yet filters tell them apart: a fixed field must not leave the old one stored."""
    document = {"text": USERS, "source": "guide/users.md", "category": "guide"}
    assert client.post("/documents", json=document | {"metadata": {"reviewed": 1}}, headers=AUTH).json()["status"] == "replaced"
    fixed = client.post("/documents", json=document | {"metadata": {"reviewed": True}}, headers=AUTH).json()
    assert fixed["status"] == "replaced"
    assert client.post("/documents", json=document | {"metadata": {"reviewed": True}}, headers=AUTH).json()["status"] == "unchanged"
    assert client.get("/documents/guide/users.md", headers=AUTH).json()["metadata"] == {"reviewed": True}
    hits = client.post("/search", json={"query": "roles", "filters": {"reviewed": True}}, headers=AUTH).json()["results"]
    assert hits and {hit["doc_id"] for hit in hits} == {"guide/users.md"}
    assert client.post("/documents", json=document | {"metadata": {"reviewed": 1}}, headers=AUTH).json()["status"] == "replaced"
    same_number = client.post("/documents", json=document | {"metadata": {"reviewed": 1.0}}, headers=AUTH).json()
    assert same_number["status"] == "unchanged", "filters compare numbers as numbers: 1.0 is 1"


def test_delete_removes_the_document(client: TestClient) -> None:
    deleted = client.delete("/documents/guide/users.md", headers=AUTH)
    assert deleted.status_code == 200 and deleted.json()["deleted_chunks"] >= 2
    assert [d["doc_id"] for d in client.get("/documents", headers=AUTH).json()["documents"]] == ["guide/operations.md"]
    assert client.delete("/documents/guide/users.md", headers=AUTH).status_code == 404


def test_bad_requests_are_refused(client: TestClient) -> None:
    assert client.post("/search", json={"query": "x"}).status_code == 401
    for body in ({"query": ""}, {"query": "x", "top_k": 0}, {"query": "x", "top_k": 51}):
        response = client.post("/search", json=body, headers=AUTH)
        assert response.status_code == 422 and response.json()["error"] == "invalid_request"
    bad = client.post("/search", content=b"{not json", headers=AUTH | {"Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"] == "malformed_json"
    assert client.post("/documents", json={"text": "   "}, headers=AUTH).status_code == 422
    # Text the tokenizer cannot encode (an unpaired surrogate) is refused as malformed JSON, in every mode.
    json_type = AUTH | {"Content-Type": "application/json"}
    for mode in ("hybrid", "dense", "keyword"):
        lone = client.post("/search", content=b'{"query": "add a \\ud800 user", "mode": "%s"}' % mode.encode(), headers=json_type)
        assert lone.status_code == 400, lone.text
        assert lone.json() == {"error": "malformed_json", "message": "request body is not valid JSON: unpaired surrogate \\ud800 in a string"}
    document = client.post("/documents", content=b'{"text": "a \\udc00 b", "source": "s.md"}', headers=json_type)
    assert document.status_code == 400 and document.json()["error"] == "malformed_json"
    # A whole number beyond 64 bits is refused, not sent to Chroma (which failed on it: a 503).
    for mode in ("hybrid", "dense", "keyword"):
        for page in (2**63, 1e19):
            huge = client.post("/search", json={"query": "add a user", "mode": mode, "filters": {"page": page}}, headers=AUTH)
            assert huge.status_code == 422 and "64 bits" in huge.json()["message"], huge.text
        largest = client.post("/search", json={"query": "add a user", "mode": mode, "filters": {"page": 2**63 - 1}}, headers=AUTH)
        assert largest.status_code == 200 and largest.json()["results"] == []
    paired = client.post("/search", content=b'{"query": "add a user \\ud83d\\ude00"}', headers=json_type)
    assert paired.status_code == 200 and paired.json()["query"] == "add a user \U0001f600"


def test_the_index_survives_a_restart(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    with TestClient(create_app(settings_for(tmp_path), embedder=embedder)) as first:
        assert first.post("/documents", json={"text": USERS, "source": "users.md"}, headers=AUTH).status_code == 200
    with TestClient(create_app(settings_for(tmp_path), embedder=embedder)) as again:
        assert [d["doc_id"] for d in again.get("/documents", headers=AUTH).json()["documents"]] == ["users.md"]
        assert again.post("/documents", json={"text": USERS, "source": "users.md"}, headers=AUTH).json()["status"] == "unchanged"
        assert again.get("/readyz").json()["checks"] == {"chroma": True, "embedder": True, "index": True}


def test_a_stopped_service_lets_go_of_its_index_files(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    """Chroma holds an embedded index's files, and the index in memory, until its client is closed."""
    settings = settings_for(tmp_path)

    def index_files_open() -> list[str]:
        return [f.path for f in psutil.Process().open_files() if Path(f.path).is_relative_to(settings.chroma_path)]

    with TestClient(create_app(settings, embedder=embedder)) as client:
        assert client.post("/documents", json={"text": USERS, "source": "users.md"}, headers=AUTH).status_code == 200
        assert index_files_open()
    assert index_files_open() == []


def test_chunks_respect_the_budget_in_real_model_tokens(embedder: SentenceTransformerEmbedder) -> None:
    texts = [p.read_text() for p in sorted((REPO / "docs").glob("*.md"))] or [OPERATIONS * 20]
    for text in texts:
        chunks = chunk_text(text, count_tokens=embedder.count_tokens, chunk_size=64, chunk_overlap=8)
        assert chunks
        assert max(embedder.count_tokens(c.text) for c in chunks) <= 64
    assert embedder.max_tokens == 254


def test_chroma_server_down_gives_503_then_recovers(tmp_path: Path, embedder: SentenceTransformerEmbedder) -> None:
    server = ChromaServer(tmp_path / "chroma-server")
    settings = settings_for(tmp_path, chroma_url=server.url, chroma_timeout_s=5)
    with TestClient(create_app(settings, embedder=embedder)) as client:
        started = time.perf_counter()
        down = client.post("/search", json={"query": "anything"}, headers=AUTH)
        assert time.perf_counter() - started < 5, "a refused connection must not wait for the timeout"
        assert down.status_code == 503 and down.json()["error"] == "chroma_unavailable"
        not_ready = client.get("/readyz")  # started without Chroma: no index to answer from yet
        assert not_ready.status_code == 503 and not_ready.json()["checks"] == {"chroma": False, "embedder": True, "index": False}
        server.start()
        try:
            added = client.post("/documents", json={"text": USERS, "source": "users.md"}, headers=AUTH)
            assert added.status_code == 200 and added.json()["status"] == "added"
            # The keyword index reloads in the background once Chroma is back: recovery is by
            # itself but not instant, so allow it a bounded time.
            searched: list = []

            def search_recovered() -> bool:
                response = client.post("/search", json={"query": "How do I add a user?"}, headers=AUTH)
                searched.append(response)
                return response.status_code == 200 and bool(response.json()["results"])

            wait_until(search_recovered, timeout=20, interval=0.5, what=f"search to recover: {searched[-1:]}")
            hit = searched[-1].json()["results"][0]
            assert hit["doc_id"] == "users.md"
            assert client.get("/readyz").status_code == 200
            server.stop()
            # What the replica holds in memory (keyword index, vectors and metadata) still answers searches,
            # filtered or not; anything that needs Chroma names it.
            for filters in (None, {"doc_id": "users.md"}):
                again = client.post("/search", json={"query": "How do I add a user?", "filters": filters}, headers=AUTH)
                assert again.status_code == 200 and again.json()["results"][0]["doc_id"] == "users.md", filters
            for needs_chroma in (
                client.get("/documents/users.md", headers=AUTH),
                client.post("/documents", json={"text": "# More\n\nAnother page.", "source": "more.md"}, headers=AUTH),
            ):
                assert needs_chroma.status_code == 503 and needs_chroma.json()["error"] == "chroma_unavailable"
            # Still serving from memory: ready, with Chroma reported down.
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["checks"]["chroma"] is False
        finally:
            server.stop()


async def test_embeddings_are_unit_length_and_keep_their_order_across_batches(embedder: SentenceTransformerEmbedder) -> None:
    texts = [f"sentence number {i} about topic {i % 7}" for i in range(150)]  # three batches of at most 64
    vectors = await embedder.embed_documents(texts)
    assert len(vectors) == 150 and len(vectors[0]) == 384
    for i in (0, 64, 149):
        alone = await embedder.embed_query(texts[i])
        assert sum(a * b for a, b in zip(alone, vectors[i])) == pytest.approx(1.0, abs=1e-4)
    assert sum(v * v for v in vectors[77]) == pytest.approx(1.0, abs=1e-4)
    assert await embedder.embed_documents([]) == []
