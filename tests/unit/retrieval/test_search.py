from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY

from services.retrieval.adapters.bm25_index import Bm25Index, keyword_indexed
from services.retrieval.ingestion import NewDocument, ingest_document
from services.retrieval.search import RerankUnavailable, SearchOptions, search
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore, bag_of_words

pytestmark = pytest.mark.unit

DOCS = {
    "users.md": ("# Users\n\nAdd a user with cairn user add NAME and a role.", "admin", 3),
    "start.md": ("# Start\n\nStart every service with make up and stop with Ctrl-C.", "ops", 1),
    "eval.md": ("# Evaluation\n\nMeasure nDCG on a BEIR folder of users and queries.", "ops", 2),
    "roles.md": ("# Roles\n\nAdministrators manage accounts; analysts read dashboards.", "admin", 5),
}


@dataclass
class Indexed:
    embedder: FakeEmbedder
    store: object
    index: Bm25Index

    async def search(self, **kwargs):
        return await search(embedder=self.embedder, store=self.store, keywords=self.index, **kwargs)


@pytest.fixture(params=[0, 1000], ids=["store-dense", "exact-dense"])
async def indexed(request: pytest.FixtureRequest) -> Indexed:
    """Every search test runs twice: the dense leg answered by the store, and by the index's exact scan."""
    embedder = FakeEmbedder()
    store, index, sync = keyword_indexed(FakeStore(), exact_max_chunks=request.param)
    await sync.refresh()
    for source, (text, category, _) in DOCS.items():
        await ingest_document(
            NewDocument(text=text, source=source, category=category),
            embedder=embedder, store=store, chunk_size=50, chunk_overlap=0,
        )
    # A numeric field to filter ranges on, written through the same store.
    for chunk in list(store.inner.chunks.values()):
        await store.upsert([type(chunk)(chunk.chunk_id, chunk.doc_id, chunk.content, chunk.embedding, chunk.metadata | {"level": DOCS[chunk.doc_id][2]})])
    index.build()  # as the sync task does soon after writes; until then the store answers dense queries
    return Indexed(embedder, store, index)


def cosine(query: str, text: str) -> float:
    return sum(a * b for a, b in zip(bag_of_words(query), bag_of_words(text)))


async def test_dense_results_are_ranked_by_cosine_similarity(indexed: Indexed) -> None:
    hits = await indexed.search(query="how do I add a user", top_k=3, mode="dense")
    assert hits[0].doc_id == "users.md"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.dense_score == h.score and h.keyword_score is None for h in hits)
    assert hits[0].score == pytest.approx(cosine("how do I add a user", hits[0].content))
    assert [h.dense_rank for h in hits] == [1, 2, 3]


async def test_keyword_results_are_bm25_over_stemmed_words(indexed: Indexed) -> None:
    hits = await indexed.search(query="adding users", top_k=4, mode="keyword")
    # "adding" -> "add", "users" -> "user": both match users.md; eval.md only has "users".
    assert [h.doc_id for h in hits] == ["users.md", "eval.md"]
    assert all(h.score == h.keyword_score and h.score > 0 and h.dense_score is None for h in hits)
    assert hits[0].score > hits[1].score and [h.keyword_rank for h in hits] == [1, 2]
    assert await indexed.search(query="the and of", top_k=3, mode="keyword") == []  # stopwords only


async def test_hybrid_scores_are_reciprocal_rank_fusion_with_a_cosine_for_every_result(indexed: Indexed) -> None:
    query = "administrators add user accounts"
    hits = await indexed.search(query=query, top_k=4)
    assert {h.doc_id for h in hits} >= {"users.md", "roles.md"}
    for hit in hits:
        expected = sum(1 / (60 + rank) for rank in (hit.dense_rank, hit.keyword_rank) if rank is not None)
        assert hit.score == pytest.approx(expected)
        assert hit.dense_score == pytest.approx(cosine(query, hit.content), abs=1e-6)  # the exact scan is float32
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert any(h.keyword_score is not None for h in hits) and any(h.dense_rank is not None for h in hits)


class OneNearest:
    """A store whose nearest-neighbour query returns a single chunk, so other hits come from keywords alone."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def nearest(self, **kwargs):
        return (await self.inner.nearest(**kwargs))[:1]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


async def test_keyword_only_hits_get_their_cosine_computed(indexed: Indexed) -> None:
    store = CountingReads(OneNearest(indexed.store))
    hits = await search(query="users", top_k=3, embedder=indexed.embedder, store=store, keywords=indexed.index)
    keyword_only = [h for h in hits if h.dense_rank is None]
    assert keyword_only, "the test needs a chunk that only the keyword leg found"
    for hit in keyword_only:
        assert hit.dense_score == pytest.approx(cosine("users", hit.content))
    keeps_vectors = indexed.index.exact_max_chunks > 0
    assert sorted(store.read_ids) == ([] if keeps_vectors else sorted(h.chunk_id for h in keyword_only)), (
        "the vectors the index keeps for exact search spare the store read"
    )


async def test_leg_weights_steer_the_fusion(indexed: Indexed) -> None:
    query = "users measure"
    dense = await indexed.search(query=query, top_k=3, mode="dense")
    dense_only = await indexed.search(query=query, top_k=3, options=SearchOptions(keyword_weight=0.0))
    assert [h.chunk_id for h in dense_only] == [h.chunk_id for h in dense]
    keyword = await indexed.search(query=query, top_k=2, mode="keyword")
    keyword_only = await indexed.search(query=query, top_k=2, options=SearchOptions(dense_weight=0.0))
    assert [h.chunk_id for h in keyword_only] == [h.chunk_id for h in keyword]


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
async def test_threshold_is_a_minimum_cosine_in_every_mode(indexed: Indexed, mode: str) -> None:
    everything = await indexed.search(query="add a user role", top_k=4, mode=mode, threshold=-1.0)
    cosines = sorted(h.dense_score for h in everything)
    assert len(cosines) >= 2 and cosines[0] < cosines[-1]
    cut = (cosines[0] + cosines[-1]) / 2
    kept = await indexed.search(query="add a user role", top_k=4, mode=mode, threshold=cut)
    assert 1 <= len(kept) < len(everything)
    assert all(h.dense_score >= cut for h in kept)


async def test_keyword_mode_with_a_threshold_fills_top_k_from_further_down(indexed: Indexed) -> None:
    query = "users add service measure accounts start"
    everything = await indexed.search(query=query, top_k=10, mode="keyword", threshold=-1.0)
    cut = everything[1].dense_score + 0.001  # the second keyword hit falls short, later ones pass
    passing = [h.chunk_id for h in everything if h.dense_score >= cut]
    assert len(passing) >= 2 and passing[1] != everything[1].chunk_id
    kept = await indexed.search(query=query, top_k=2, mode="keyword", threshold=cut)
    assert [h.chunk_id for h in kept] == passing[:2], "as dense and hybrid do, not fewer than top_k"


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
@pytest.mark.parametrize(
    ("filters", "allowed"),
    [
        ({"category": "ops"}, {"start.md", "eval.md"}),
        ({"doc_id": {"$in": ["users.md", "eval.md"]}}, {"users.md", "eval.md"}),
        ({"category": {"$ne": "ops"}}, {"users.md", "roles.md"}),
        ({"level": {"$gte": 2, "$lt": 5}}, {"users.md", "eval.md"}),
        ({"category": "admin", "level": {"$gt": 3}}, {"roles.md"}),
    ],
)
async def test_filters_apply_in_every_mode(indexed: Indexed, mode: str, filters: dict, allowed: set[str]) -> None:
    query = "users add service measure accounts start"
    unfiltered = {h.doc_id for h in await indexed.search(query=query, top_k=10, mode=mode)}
    assert unfiltered - allowed, "the filter must have something to remove"
    hits = await indexed.search(query=query, top_k=10, mode=mode, filters=filters)
    assert hits and {h.doc_id for h in hits} <= allowed


async def test_top_k_mode_and_wiring_are_checked(indexed: Indexed) -> None:
    assert len(await indexed.search(query="make", top_k=1)) == 1
    with pytest.raises(ValueError):
        await indexed.search(query="make", top_k=0)
    with pytest.raises(ValueError):
        await indexed.search(query="make", top_k=1, mode="fuzzy")
    with pytest.raises(ValueError, match="keyword index"):
        await search(query="make", top_k=1, embedder=indexed.embedder, store=indexed.store)


class LengthReranker:
    """Scores a passage by its length: an order no search leg would produce."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    async def score(self, *, query: str, passages: list[str]) -> list[float]:
        self.calls.append(len(passages))
        return [float(len(p)) for p in passages]


async def test_rerank_reorders_the_head_by_its_scores(indexed: Indexed) -> None:
    reranker = LengthReranker()
    options = SearchOptions(rerank_candidates=3)
    plain = await indexed.search(query="users add accounts service", top_k=3, options=options)
    reranked = await indexed.search(query="users add accounts service", top_k=3, options=options, reranker=reranker)
    assert reranker.calls == [3]
    assert [h.rerank_score for h in reranked] == sorted((float(len(h.content)) for h in plain), reverse=True)
    assert {h.chunk_id for h in reranked} == {h.chunk_id for h in plain}
    assert [h.chunk_id for h in reranked] != [h.chunk_id for h in plain], "the test needs an order rerank changes"
    skipped = await indexed.search(query="users add accounts service", top_k=3, options=options, reranker=reranker, rerank=False)
    assert [h.chunk_id for h in skipped] == [h.chunk_id for h in plain] and reranker.calls == [3]
    with pytest.raises(RerankUnavailable):
        await indexed.search(query="users", top_k=3, rerank=True)


class BrokenReranker:
    async def score(self, *, query: str, passages: list[str]) -> list[float]:
        raise RuntimeError("the cross-encoder ran out of memory")


async def test_a_failing_rerank_answers_in_the_order_of_the_search(indexed: Indexed, caplog) -> None:
    failures = REGISTRY.get_sample_value("cairn_retrieval_rerank_failures_total") or 0.0
    plain = await indexed.search(query="users add accounts service", top_k=3)
    fallen_back = await indexed.search(query="users add accounts service", top_k=3, reranker=BrokenReranker())
    assert [h.chunk_id for h in fallen_back] == [h.chunk_id for h in plain]
    assert all(h.rerank_score is None for h in fallen_back)
    assert REGISTRY.get_sample_value("cairn_retrieval_rerank_failures_total") == failures + 1
    assert "rerank failed" in caplog.text


async def test_a_keyword_hit_deleted_from_the_store_is_not_returned(indexed: Indexed) -> None:
    # The store lost the chunk behind the index's back (another replica, not yet synced).
    del indexed.store.inner.chunks["eval.md#0"]
    hits = await indexed.search(query="measure ndcg", top_k=3)
    if indexed.index.exact_max_chunks == 0:
        # The store's dense leg lacks it, so its cosine is read from the store, which no longer has it.
        assert "eval.md#0" not in {h.chunk_id for h in hits}
    else:
        # Both legs answer from memory until the sync reads the document back (other replicas' writes
        # reach every mode after the same delay).
        assert "eval.md#0" in {h.chunk_id for h in hits}
    indexed.index.load([], doc_ids=["eval.md"], since=indexed.index.generation)  # what the sync then does
    indexed.index.build()
    hits = await indexed.search(query="measure ndcg", top_k=3)
    assert "eval.md#0" not in {h.chunk_id for h in hits}


class CountingReads:
    """A store that counts the chunk reads search makes after its legs."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.read_ids: list[str] = []

    async def get_chunks(self, *, ids=None, **kwargs):
        self.read_ids += ids or []
        return await self.inner.get_chunks(ids=ids, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


async def test_dense_results_take_their_content_from_the_keyword_index(indexed: Indexed) -> None:
    store = CountingReads(indexed.store)
    hits = await search(query="how do I add a user", top_k=3, mode="dense", embedder=indexed.embedder, store=store, keywords=indexed.index)
    assert hits[0].doc_id == "users.md" and "cairn user add" in hits[0].content
    assert hits[0].metadata["category"] == "admin" and hits[0].metadata["level"] == 3
    assert store.read_ids == [], "no store read when the keyword index holds every result"


async def test_a_chunk_the_keyword_index_lacks_is_read_from_the_store(indexed: Indexed) -> None:
    # Another replica's write, not yet synced into this replica's keyword index.
    indexed.index.remove("users.md")
    store = CountingReads(indexed.store)
    hits = await search(query="how do I add a user", top_k=3, mode="dense", embedder=indexed.embedder, store=store, keywords=indexed.index)
    assert hits[0].doc_id == "users.md" and "cairn user add" in hits[0].content
    assert store.read_ids == ["users.md#0"]
    alone = await search(query="how do I add a user", top_k=3, mode="dense", embedder=indexed.embedder, store=indexed.store)
    assert [(h.chunk_id, h.content, h.metadata) for h in alone] == [(h.chunk_id, h.content, h.metadata) for h in hits]
