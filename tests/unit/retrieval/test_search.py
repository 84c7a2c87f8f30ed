from __future__ import annotations

import pytest

from services.retrieval.ingestion import NewDocument, ingest_document
from services.retrieval.search import search
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit

DOCS = {
    "users.md": ("# Users\n\nAdd a user with cairn user add NAME and a role.", "admin"),
    "start.md": ("# Start\n\nStart every service with make up and stop with Ctrl-C.", "ops"),
    "eval.md": ("# Evaluation\n\nMeasure nDCG on a BEIR folder.", "ops"),
}


@pytest.fixture
async def indexed() -> tuple[FakeEmbedder, FakeStore]:
    embedder, store = FakeEmbedder(), FakeStore()
    for source, (text, category) in DOCS.items():
        await ingest_document(
            NewDocument(text=text, source=source, category=category),
            embedder=embedder, store=store, chunk_size=50, chunk_overlap=0,
        )
    return embedder, store


async def test_results_are_ranked_by_cosine_similarity(indexed) -> None:
    embedder, store = indexed
    hits = await search(query="how do I add a user", top_k=3, embedder=embedder, store=store)
    assert hits[0].doc_id == "users.md"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.dense_score == h.score and h.keyword_score is None for h in hits)
    assert 0 < hits[0].score <= 1


async def test_threshold_drops_weak_results(indexed) -> None:
    embedder, store = indexed
    everything = await search(query="add a user", top_k=3, embedder=embedder, store=store)
    cut = (everything[0].score + everything[-1].score) / 2
    kept = await search(query="add a user", top_k=3, threshold=cut, embedder=embedder, store=store)
    assert 1 <= len(kept) < len(everything)
    assert all(h.score >= cut for h in kept)


async def test_filters_restrict_by_metadata(indexed) -> None:
    embedder, store = indexed
    hits = await search(query="add a user", top_k=3, filters={"category": "ops"}, embedder=embedder, store=store)
    assert {h.doc_id for h in hits} == {"start.md", "eval.md"}


async def test_top_k_limits_and_is_checked(indexed) -> None:
    embedder, store = indexed
    assert len(await search(query="make", top_k=1, embedder=embedder, store=store)) == 1
    with pytest.raises(ValueError):
        await search(query="make", top_k=0, embedder=embedder, store=store)
