"""The exact dense scan against Chroma's HNSW index, on the real MiniLM vectors of part of the demo collection."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.ingestion import NewDocument, ingest_document

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[3] / "docs"
# A fifth of the demo collection by size (about 80 chunks): every guide encoded took 40 s as docs/ grew.
GUIDES = ("getting-started.md", "users-and-roles.md", "asking-questions.md", "dashboard.md", "events.md")
QUERIES = (
    "How do I add a user?",
    "Which port does the gateway listen on?",
    "How are events delivered when RabbitMQ is down?",
    "What does the confidence level mean?",
    "How do I run several retrieval replicas?",
    "Does Cairn support Oracle?",
)


async def guides_indexed(tmp_path: Path, unique: str, embedder: SentenceTransformerEmbedder):
    """The guides in an embedded Chroma behind the synced store, every other one in category "ops", the rest
    "guide"; the index built, so the scan can answer."""
    chroma = ChromaStore(collection=unique, path=tmp_path / "chroma")
    store, index, sync = keyword_indexed(chroma, exact_max_chunks=10_000)
    await sync.refresh()
    for position, path in enumerate(DOCS / name for name in GUIDES):
        category = "ops" if position % 2 else "guide"
        document = NewDocument(text=path.read_text(), source=f"docs/{path.name}", metadata={"category": category})
        await ingest_document(document, embedder=embedder, store=store, chunk_size=256, chunk_overlap=32)
    index.build()
    return chroma, store, index


async def test_the_scan_returns_what_chroma_returns_for_the_demo_collection(
    tmp_path: Path, unique: str, embedder: SentenceTransformerEmbedder
) -> None:
    chroma, store, index = await guides_indexed(tmp_path, unique, embedder)
    dense = index.exact_dense()
    assert dense is not None and len(dense) == len(await chroma.get_chunks()) > 50

    for query in QUERIES:
        vector = await embedder.embed_query(query)
        exact = await store.nearest(embedding=vector, top_k=10)
        approximate = await chroma.nearest(embedding=vector, top_k=10)
        # On a collection this small HNSW finds the true neighbours; near-ties may swap places.
        assert {cid for cid, _ in exact[:8]} <= {cid for cid, _ in approximate}, query
        assert [d for _, d in exact] == sorted(d for _, d in exact)
        by_id = dict(approximate)
        for chunk_id, distance in exact:
            if chunk_id in by_id:
                assert distance == pytest.approx(by_id[chunk_id], abs=1e-4), (query, chunk_id)


async def test_filtered_queries_get_what_chroma_returns_for_the_chunks_the_filter_lets_through(
    tmp_path: Path, unique: str, embedder: SentenceTransformerEmbedder
) -> None:
    chroma, store, _ = await guides_indexed(tmp_path, unique, embedder)
    asked_chroma = 0
    chroma_nearest = chroma.nearest

    async def counted(**kwargs):
        nonlocal asked_chroma
        asked_chroma += 1
        return await chroma_nearest(**kwargs)

    chroma.nearest = counted  # type: ignore[method-assign]
    filters = ({"category": "ops"}, {"doc_id": {"$in": ["docs/events.md", "docs/dashboard.md"]}}, {"chunk_index": {"$gte": 3}})
    for query in QUERIES:
        vector = await embedder.embed_query(query)
        for where in filters:
            exact = await store.nearest(embedding=vector, top_k=5, where=where)
            approximate = await chroma_nearest(embedding=vector, top_k=5, where=where)
            assert exact, (query, where)
            assert {cid for cid, _ in exact[:4]} <= {cid for cid, _ in approximate}, (query, where)
            by_id = dict(approximate)
            for chunk_id, distance in exact:
                if chunk_id in by_id:
                    assert distance == pytest.approx(by_id[chunk_id], abs=1e-4), (query, where, chunk_id)
    assert asked_chroma == 0, "the scan answered every filtered query"
