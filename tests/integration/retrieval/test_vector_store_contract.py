"""One contract, three implementations: the in-memory fake, embedded Chroma and Chroma server."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.ports import StoredChunk, VectorStore
from tests.unit.retrieval.fakes import FakeStore

pytestmark = pytest.mark.integration


def unit(*values: float) -> list[float]:
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


def chunk(doc_id: str, index: int, embedding: list[float], **meta) -> StoredChunk:
    metadata = {"chunk_index": index, "content_hash": meta.pop("content_hash", "h1"), "title": doc_id.upper(), **meta}
    return StoredChunk(f"{doc_id}#{index}", doc_id, f"{doc_id} chunk {index}", embedding, metadata)


@pytest.fixture(params=["fake", "embedded", "server"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, unique: str) -> VectorStore:
    if request.param == "fake":
        return FakeStore()
    if request.param == "embedded":
        return ChromaStore(collection=unique, path=tmp_path / "chroma")
    server = request.getfixturevalue("chroma_server")
    return ChromaStore(collection=unique, url=server.url)


async def test_query_ranks_by_cosine_distance_and_filters(store: VectorStore) -> None:
    await store.upsert(
        [
            chunk("a", 0, unit(1, 0, 0), category="x"),
            chunk("a", 1, unit(1, 1, 0), category="y"),
            chunk("b", 0, unit(0, 0, 1), category="x"),
        ]
    )
    hits = await store.query(embedding=unit(1, 0.1, 0), top_k=3)
    assert [h.chunk_id for h in hits] == ["a#0", "a#1", "b#0"]
    assert hits[0].distance == pytest.approx(1 - unit(1, 0.1, 0)[0], abs=1e-4)
    assert hits[2].distance == pytest.approx(1.0, abs=1e-4)
    assert hits[0].metadata["title"] == "A" and hits[0].content == "a chunk 0" and hits[0].doc_id == "a"
    filtered = await store.query(embedding=unit(1, 0.1, 0), top_k=3, where={"category": "x", "doc_id": "b"})
    assert [h.chunk_id for h in filtered] == ["b#0"]
    assert await store.query(embedding=unit(1, 0, 0), top_k=1) != []


async def test_documents_are_listed_and_deleted(store: VectorStore) -> None:
    await store.upsert([chunk("a", i, unit(1, i, 0)) for i in range(3)] + [chunk("b", 0, unit(0, 1, 0), url="http://b")])
    listed = await store.list_documents()
    assert [(d.doc_id, d.chunks) for d in listed] == [("a", 3), ("b", 1)]
    assert listed[1].metadata == {"title": "B", "url": "http://b", "content_hash": "h1"}
    info = await store.get_document("a")
    assert info is not None and info.content_hashes == frozenset({"h1"})
    assert await store.delete(doc_id="a", from_chunk_index=1) == 2
    assert (await store.get_document("a")).chunks == 1
    assert await store.delete(doc_id="a") == 1
    assert await store.get_document("a") is None
    assert await store.delete(doc_id="a") == 0


async def test_upsert_overwrites_by_chunk_id(store: VectorStore) -> None:
    await store.upsert([chunk("a", 0, unit(1, 0), content_hash="old")])
    await store.upsert([chunk("a", 0, unit(0, 1), content_hash="new")])
    (info,) = await store.list_documents()
    assert info.content_hashes == frozenset({"new"}) and info.chunks == 1
    assert await store.heartbeat() is True
