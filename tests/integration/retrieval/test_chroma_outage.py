"""Retrieval on a real `chroma run` server that fails: frozen with SIGSTOP (as when its host goes silent:
connections open, no reply), requests that need Chroma get a 503 naming it within about CHROMA_TIMEOUT_S,
the searches held in memory (filtered ones too) and /readyz go on answering, and all recovers when Chroma does; stopped between
two writes, it keeps each document whole or absent."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from chromadb.api.shared_system_client import SharedSystemClient
from fastapi.testclient import TestClient

from cairn.ingest import IngestError, RetrievalUnreachable, ingest_paths
from services.retrieval.adapters import chroma_store
from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app
from services.retrieval.ports import StoredChunk
from services.retrieval.settings import Settings
from shared.errors import DependencyUnavailable
from tests.integration.retrieval.chroma_server import ChromaServer
from tests.support import serve_in_thread, wait_until

pytestmark = pytest.mark.integration

TOKEN = "outage-token"
AUTH = {"X-Service-Token": TOKEN}
TIMEOUT_S = 1.0
# More requests needing Chroma at once than asyncio's default thread pool holds (cores + 4: 6 here).
AT_ONCE = 12


@pytest.fixture
def chroma(tmp_path: Path) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path / "chroma-server")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def timed(call) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_a_silent_chroma_gives_503s_in_time_while_memory_keeps_answering(
    tmp_path: Path, chroma: ChromaServer, embedder: SentenceTransformerEmbedder, unique: str
) -> None:
    settings = Settings(
        service_token=TOKEN, data_dir=tmp_path, chroma_url=chroma.url, chroma_collection=unique, chroma_timeout_s=TIMEOUT_S
    )
    with TestClient(create_app(settings, embedder=embedder)) as client, ThreadPoolExecutor(AT_ONCE + 2) as pool:
        wildlife = {"text": "# Wildlife\n\nQuokkas live on Rottnest Island.", "doc_id": "wildlife.md", "category": "animals"}
        added = client.post("/documents", json=wildlife, headers=AUTH)
        assert added.status_code == 200, added.text
        chroma.pause()
        try:
            needing_chroma = [
                pool.submit(timed, lambda i=i: client.get(f"/documents/doc-{i}", headers=AUTH)) for i in range(AT_ONCE // 2)
            ] + [
                pool.submit(timed, lambda i=i: client.post(
                    "/documents", json={"text": f"Note {i}.", "doc_id": f"note-{i}.md"}, headers=AUTH
                ))
                for i in range(AT_ONCE // 2)
            ]
            time.sleep(TIMEOUT_S / 2)
            animals = {"category": "animals"}
            for mode, filters in (("keyword", None), ("hybrid", None), ("dense", None), ("dense", animals), ("hybrid", animals)):
                search = {"query": "quokkas", "mode": mode, "filters": filters}
                from_memory = pool.submit(timed, lambda body=search: client.post("/search", json=body, headers=AUTH))
                response, took = from_memory.result(timeout=3 * TIMEOUT_S)  # raises TimeoutError when it hangs
                assert response.status_code == 200 and response.json()["results"][0]["doc_id"] == "wildlife.md", response.text
                assert took < 1.5 * TIMEOUT_S, f"{mode} search from memory took {took:.1f}s"
            for waiting in needing_chroma:
                response, took = waiting.result(timeout=5 * TIMEOUT_S)
                assert response.status_code == 503 and response.json()["error"] == "chroma_unavailable", response.text
                assert took < TIMEOUT_S + 1.5, f"a 503 took {took:.1f}s, with CHROMA_TIMEOUT_S={TIMEOUT_S}"
            assert client.get("/readyz").json()["checks"] == {"chroma": False, "embedder": True, "index": True}
        finally:
            chroma.resume()

        def recovered() -> bool:
            return client.get("/documents/wildlife.md", headers=AUTH).status_code == 200

        wait_until(recovered, timeout=10, interval=0.2, what="document reads to recover")
        assert client.get("/readyz").json()["checks"]["chroma"] is True


async def test_a_server_lost_between_two_writes_leaves_no_document_half_written(chroma: ChromaServer, unique: str) -> None:
    """Documents ingested together are written together, in calls of at most _UPSERT_PER_CALL chunks. A
    document cut across two calls was left with only its first chunks when the server went down between
    them, and since those carry its content hash, the retry found it "unchanged" and never completed it."""
    store = ChromaStore(collection=unique, url=chroma.url, timeout_s=TIMEOUT_S)
    per_document = chroma_store._UPSERT_PER_CALL * 3 // 5
    documents = {
        doc_id: [
            StoredChunk(f"{doc_id}#{i}", doc_id, f"chunk {i}", [1.0, i / per_document], {"chunk_index": i, "content_hash": "h"})
            for i in range(per_document)
        ]
        for doc_id in ("first", "second")
    }
    run, calls = store._run, 0

    async def server_lost_after_the_first_call(operation):
        nonlocal calls
        result = await run(operation)
        calls += 1
        if calls == 1:
            chroma.stop()
        return result

    store._run = server_lost_after_the_first_call  # type: ignore[method-assign]
    outcomes = await asyncio.gather(*(store.upsert(chunks) for chunks in documents.values()), return_exceptions=True)
    assert any(isinstance(outcome, DependencyUnavailable) for outcome in outcomes), outcomes
    chroma.start()
    stored = await ChromaStore(collection=unique, url=chroma.url).get_chunks(doc_ids=list(documents))
    counts = {doc_id: sum(c.doc_id == doc_id for c in stored) for doc_id in documents}
    assert all(count in (0, per_document) for count in counts.values()), counts


async def test_each_reconnection_lets_go_of_the_client_it_replaces(chroma: ChromaServer, unique: str) -> None:
    """Chroma keeps every server client it makes under an id of its own until the client is closed; the
    store dropped its client on each failure without closing it, so each outage left one behind for good."""
    store = ChromaStore(collection=unique, url=chroma.url, timeout_s=TIMEOUT_S)
    await store.upsert([StoredChunk("a#0", "a", "chunk", [1.0, 0.0], {"chunk_index": 0, "content_hash": "h"})])
    clients_before = len(SharedSystemClient._identifier_to_system)
    for _ in range(3):
        chroma.pause()
        with pytest.raises(DependencyUnavailable):
            await store.get_chunks()
        chroma.resume()
        assert [c.chunk_id for c in await store.get_chunks()] == ["a#0"]
    assert len(SharedSystemClient._identifier_to_system) == clients_before
    store.close()


def test_readiness_answers_quickly_while_chroma_is_silent(
    tmp_path: Path, chroma: ChromaServer, embedder: SentenceTransformerEmbedder, unique: str
) -> None:
    """Probes give /readyz a few seconds (3 in deploy/k8s, 2 from chat). Waiting CHROMA_TIMEOUT_S for the
    heartbeat of a silent Chroma made every replica fail its probe and leave the load balancer, though
    it could answer from memory."""
    settings = Settings(service_token=TOKEN, data_dir=tmp_path, chroma_url=chroma.url, chroma_collection=unique)
    assert settings.chroma_timeout_s >= 5
    with TestClient(create_app(settings, embedder=embedder)) as client:
        assert client.get("/readyz").json()["checks"]["chroma"] is True
        chroma.pause()
        try:
            response, took = timed(lambda: client.get("/readyz"))
        finally:
            chroma.resume()
        assert response.status_code == 200 and response.json()["checks"] == {"chroma": False, "embedder": True, "index": True}
        assert took < 2, f"/readyz took {took:.1f}s"


def test_cairn_ingest_with_chroma_down_names_chroma_not_an_unreachable_retrieval(
    tmp_path: Path, chroma: ChromaServer, embedder: SentenceTransformerEmbedder, unique: str
) -> None:
    """Retrieval answered 503 chroma_unavailable, yet `cairn ingest` said "retrieval service not reachable",
    sending the operator to look at a retrieval service that was up."""
    settings = Settings(service_token=TOKEN, data_dir=tmp_path, chroma_url=chroma.url, chroma_collection=unique)
    (tmp_path / "note.md").write_text("# Note\n\nQuokkas live on Rottnest Island.\n")
    with serve_in_thread(create_app(settings, embedder=embedder)) as url:
        chroma.stop()
        with pytest.raises(IngestError) as refused:
            ingest_paths([tmp_path / "note.md"], retrieval_url=url, service_token=TOKEN, progress=False, base=tmp_path)
    assert not isinstance(refused.value, RetrievalUnreachable)
    assert str(refused.value) == f"retrieval service at {url} cannot take documents: HTTP 503: chroma is unavailable"
