"""Ingests of one doc_id racing each other (or a delete) on a real Chroma: afterwards one whole version
stands, and Chroma, the keyword index and the exact scan hold the same chunks."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.retrieval import ingestion
from services.retrieval.adapters.bm25_index import Bm25Index, keyword_indexed
from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.ingestion import NewDocument, content_hash, ingest_document
from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.integration.retrieval.chroma_server import ChromaServer
from tests.unit.retrieval.fakes import FakeEmbedder

pytestmark = pytest.mark.integration

TOKEN = "concurrent-ingest-token"
AUTH = {"X-Service-Token": TOKEN}
LONG = "\n\n".join(f"## Part {n}\n\nStep {n} of the long version: check the pump, the valve and gauge {n}." for n in range(6))
SHORT = "# Pump\n\nThe short version: call the service desk."


class OtherProcesses:
    """DocumentLocks as two replicas have them: each its own, so they never wait for each other."""

    @asynccontextmanager
    async def hold(self, doc_id: str) -> AsyncIterator[None]:
        yield


class Steps:
    """Holds a store call until named steps of the other replica have happened."""

    def __init__(self) -> None:
        self.done: dict[str, asyncio.Event] = {}

    def event(self, name: str) -> asyncio.Event:
        return self.done.setdefault(name, asyncio.Event())


class Paced:
    """A replica's store whose first upsert and first trim (a delete from a chunk index) wait for steps."""

    def __init__(self, inner: Any, steps: Steps, name: str, *, upsert_after: str | None, trim_after: str | None) -> None:
        self._inner, self._steps, self._name = inner, steps, name
        self._upsert_after, self._trim_after = upsert_after, trim_after

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    async def upsert(self, chunks: list) -> None:
        if self._upsert_after:
            await self._steps.event(self._upsert_after).wait()
            self._upsert_after = None
        await self._inner.upsert(chunks)
        self._steps.event(f"{self._name} upserted").set()

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        if from_chunk_index and self._trim_after:
            await self._steps.event(self._trim_after).wait()
            self._trim_after = None
        deleted = await self._inner.delete(doc_id=doc_id, from_chunk_index=from_chunk_index)
        if from_chunk_index:
            self._steps.event(f"{self._name} trimmed").set()
        return deleted


async def ingest(document: NewDocument, store: Any) -> ingestion.IngestResult:
    return await ingest_document(document, embedder=FakeEmbedder(), store=store, chunk_size=20, chunk_overlap=2)


async def test_two_replicas_writing_one_document_at_once_leave_one_whole_version(
    chroma_server: ChromaServer, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short version's upsert lands first, the long one's over it, then the short one's trim cuts the
    long one's tail: the long version, written last, was left without its last chunks."""
    monkeypatch.setattr(ingestion, "_ingesting", OtherProcesses())
    replicas = [
        keyword_indexed(ChromaStore(collection=unique, url=chroma_server.url), exact_max_chunks=100) for _ in range(2)
    ]
    for _, _, sync in replicas:
        await sync.refresh()
    steps = Steps()
    long_store = Paced(replicas[0][0], steps, "long", upsert_after="short upserted", trim_after=None)
    short_store = Paced(replicas[1][0], steps, "short", upsert_after=None, trim_after="long upserted")

    long, short = await asyncio.gather(
        ingest(NewDocument(text=LONG, doc_id="pump.md", category="manuals"), long_store),
        ingest(NewDocument(text=SHORT, doc_id="pump.md"), short_store),
    )

    assert long.chunks > short.chunks == 1
    chroma = replicas[0][0].inner
    stored = await chroma.get_chunks(doc_ids=["pump.md"])
    versions = {chunk.metadata["content_hash"] for chunk in stored}
    assert len(versions) == 1, "chunks of both versions are stored"
    winner = LONG if versions == {content_hash(LONG)} else SHORT
    whole = long if winner == LONG else short
    assert sorted(c.chunk_id for c in stored) == sorted(f"pump.md#{i}" for i in range(whole.chunks))
    assert {c.metadata.get("category") for c in stored} == ({"manuals"} if winner == LONG else {None})
    document = await chroma.get_document("pump.md")
    assert document is not None and document.complete and document.chunks == whole.chunks
    for store, index, sync in replicas:  # every replica's keyword index follows, once it reads the change feed
        await sync.refresh()
        index.build()
        held = index.held([c.chunk_id for c in stored])
        assert {cid: c.content for cid, c in held.items()} == {c.chunk_id: c.content for c in stored}
        assert not index.held([f"pump.md#{i}" for i in range(whole.chunks, long.chunks)])
        dense = index.exact_dense()
        assert dense is not None and len(dense) == len(stored)


def test_a_delete_while_an_ingest_writes_leaves_the_document_gone_from_every_index(
    tmp_path: Path, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete lands in Chroma between the ingest's upsert and the keyword index taking its chunks: the
    index then kept the deleted document, found by searches while GET /documents said 404."""
    adding, indexed = threading.Event(), threading.Event()
    add = Bm25Index.add

    def slow_add(index: Bm25Index, chunks: list) -> None:  # as a large document's tokenizing takes a while
        adding.set()
        time.sleep(0.5)
        add(index, chunks)
        indexed.set()

    settings = Settings(service_token=TOKEN, data_dir=tmp_path, chroma_collection=unique)
    with TestClient(create_app(settings, embedder=FakeEmbedder())) as client:
        monkeypatch.setattr(Bm25Index, "add", slow_add)
        with ThreadPoolExecutor(1) as pool:
            ingest = pool.submit(client.post, "/documents", json={"doc_id": "pump.md", "text": LONG}, headers=AUTH)
            assert adding.wait(10)
            deleted = client.delete("/documents/pump.md", headers=AUTH)
            assert ingest.result().status_code == 200, ingest.result().text
        assert indexed.is_set()
        listed = client.get("/documents", headers=AUTH).json()
        found = client.get("/documents/pump.md", headers=AUTH)
        for mode in ("keyword", "dense", "hybrid"):
            hits = client.post("/search", json={"query": "valve gauge pump", "mode": mode}, headers=AUTH).json()["results"]
            if deleted.status_code == 200 and found.status_code == 404:
                assert hits == [] and listed["documents"] == [], mode
            else:
                assert found.status_code == 200 and {h["doc_id"] for h in hits} == {"pump.md"}, mode
