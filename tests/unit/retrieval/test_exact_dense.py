"""The exact dense scan: its ranking, its micro-batches, and when the synced store lets it answer."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.exact_dense import ExactDense, ExactSearch
from services.retrieval.ports import StoredChunk
from tests.unit.retrieval.fakes import FakeStore, bag_of_words

pytestmark = pytest.mark.unit


def unit_rows(count: int, dimensions: int = 16, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(count, dimensions)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_the_scan_returns_the_true_top_k_with_cosine_distances() -> None:
    vectors = unit_rows(200)
    dense = ExactDense([f"c{i}" for i in range(200)], vectors)
    queries = unit_rows(5, seed=1)
    found = dense.nearest(queries, 10)
    for query, neighbours in zip(queries, found):
        similarities = vectors @ query
        expected = [f"c{i}" for i in np.argsort(-similarities)[:10]]
        assert [cid for cid, _ in neighbours] == expected
        assert [d for _, d in neighbours] == pytest.approx([1 - similarities[int(c[1:])] for c in expected], abs=1e-6)
    (alone,) = dense.nearest(queries[:1], 10)  # a matrix-vector product: the same sums in another order
    assert [cid for cid, _ in alone] == [cid for cid, _ in found[0]], "a query ranks the same alone as in a batch"
    assert [d for _, d in alone] == pytest.approx([d for _, d in found[0]], abs=1e-6)


def test_duplicate_chunks_rank_alike_whatever_top_k() -> None:
    """The same text in many documents has one vector: which copies come first must not depend on top_k."""
    vectors = np.concatenate([unit_rows(1, seed=3).repeat(40, axis=0), unit_rows(300, seed=4)])
    dense = ExactDense([f"c{i:03d}" for i in range(len(vectors))], vectors)
    query = unit_rows(1, seed=3)  # nearest to the 40 copies, all at the same distance
    (longest,) = dense.nearest(query, 40)
    assert [cid for cid, _ in longest] == [f"c{i:03d}" for i in range(40)]
    for top_k in (1, 3, 10, 25):
        assert dense.nearest(query, top_k)[0] == longest[:top_k]


def test_asking_for_more_than_it_holds_returns_everything_in_order() -> None:
    dense = ExactDense(["a", "b", "c"], np.asarray([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32))
    (found,) = dense.nearest(np.asarray([[1, 0]], dtype=np.float32), 10)
    assert [cid for cid, _ in found] == ["a", "c", "b"]
    assert [d for _, d in found] == pytest.approx([0.0, 0.4, 1.0])


def test_a_scan_needs_a_vector_of_one_length_for_every_row() -> None:
    assert ExactDense.of(["a", "b"], [np.ones(3), None]) is None
    assert ExactDense.of(["a", "b"], [np.ones(3), np.ones(4)]) is None
    assert ExactDense.of([], []) is None
    assert len(ExactDense.of(["a", "b"], [np.ones(3), np.ones(3)])) == 2
    with pytest.raises(ValueError):
        ExactDense(["a"], np.ones((2, 3)))


async def test_concurrent_queries_share_one_product_and_each_gets_its_own_answer() -> None:
    vectors = unit_rows(50)
    dense = ExactDense([f"c{i}" for i in range(50)], vectors)
    search = ExactSearch(max_batch=8)
    queries = unit_rows(6, seed=2)
    top_ks = [1, 3, 5, 7, 9, 11]
    together = await asyncio.gather(*(search.nearest(dense, embedding=q.tolist(), top_k=k) for q, k in zip(queries, top_ks)))
    assert search._batcher.batch_sizes == [6]
    for query, k, found in zip(queries, top_ks, together):
        alone = dense.nearest(query[None, :], k)[0]
        assert [cid for cid, _ in found] == [cid for cid, _ in alone]
        assert [d for _, d in found] == pytest.approx([d for _, d in alone], abs=1e-6)
    with pytest.raises(ValueError, match="dimensions"):
        await search.nearest(dense, embedding=[1.0, 0.0], top_k=3)


async def test_a_mask_limits_each_query_of_a_batch_to_its_own_rows() -> None:
    vectors = unit_rows(60)
    dense = ExactDense([f"c{i:02d}" for i in range(60)], vectors)
    search = ExactSearch(max_batch=8)
    queries = unit_rows(3, seed=7)
    even, none_at_all = np.arange(60) % 2 == 0, np.zeros(60, dtype=bool)
    found = await asyncio.gather(
        search.nearest(dense, embedding=queries[0].tolist(), top_k=5, allowed=even),
        search.nearest(dense, embedding=queries[1].tolist(), top_k=5),
        search.nearest(dense, embedding=queries[2].tolist(), top_k=5, allowed=none_at_all),
    )
    assert search._batcher.batch_sizes == [3]
    similarities = vectors @ queries[0]
    best_even = sorted(range(0, 60, 2), key=lambda row: -similarities[row])[:5]
    assert [cid for cid, _ in found[0]] == [f"c{row:02d}" for row in best_even]
    alone = dense.nearest(queries[1][None, :], 5)[0]
    assert [cid for cid, _ in found[1]] == [cid for cid, _ in alone], "a query without a mask sees every row"
    assert found[2] == []
    with pytest.raises(ValueError, match="one entry per chunk"):
        await search.nearest(dense, embedding=queries[0].tolist(), top_k=5, allowed=even[:10])


class CountingStore(FakeStore):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.nearest_calls = 0

    async def nearest(self, **kwargs):
        self.nearest_calls += 1
        return await super().nearest(**kwargs)


TEXTS = {"a": "apples and pears", "b": "plums and cherries", "c": "pears in syrup", "d": "cherry jam"}


def chunk(doc_id: str, text: str) -> StoredChunk:
    return StoredChunk(f"{doc_id}#0", doc_id, text, bag_of_words(text), {"chunk_index": 0, "category": doc_id})


async def synced(limit: int = 100, store: CountingStore | None = None):
    store = store or CountingStore()
    synced_store, index, sync = keyword_indexed(store, exact_max_chunks=limit)
    await sync.refresh()
    await synced_store.upsert([chunk(doc, text) for doc, text in TEXTS.items()])
    return synced_store, index, sync, store


async def test_the_scan_answers_unfiltered_queries_once_built_with_the_stores_ranking() -> None:
    synced_store, index, _, store = await synced()
    query = bag_of_words("pears")
    before = await synced_store.nearest(embedding=query, top_k=3)
    assert store.nearest_calls == 1, "this replica's own writes are not built in yet: the store answers"
    index.build()
    exact = await synced_store.nearest(embedding=query, top_k=3)
    assert store.nearest_calls == 1
    assert [cid for cid, _ in exact] == [cid for cid, _ in before]
    assert [d for _, d in exact] == pytest.approx([d for _, d in before], abs=1e-6)



async def test_the_scan_answers_filtered_queries_with_the_stores_ranking_of_the_chunks_let_through() -> None:
    """Chroma's filtered search is approximate, and a Chroma server's misses chunks after many deletes and
    updates (chroma-core/chroma#7758): the scan has every chunk's metadata and answers filtered queries too."""
    synced_store, index, _, store = await synced()
    index.build()
    query = bag_of_words("pears cherry")
    for where in ({"category": "c"}, {"doc_id": {"$in": ["b", "d"]}}, {"category": {"$ne": "a"}}, {"category": "z"}):
        exact = await synced_store.nearest(embedding=query, top_k=3, where=where)
        expected = await store.nearest(embedding=query, top_k=3, where=where)
        assert [cid for cid, _ in exact] == [cid for cid, _ in expected], where
        assert [d for _, d in exact] == pytest.approx([d for _, d in expected], abs=1e-6)
    assert store.nearest_calls == 4, "only the comparisons asked the store"


async def test_too_many_chunks_or_none_kept_leave_every_query_to_the_store() -> None:
    for limit in (3, 0):
        synced_store, index, _, store = await synced(limit)
        index.build()
        await synced_store.nearest(embedding=bag_of_words("pears"), top_k=3)
        assert store.nearest_calls == 1, limit
    assert index.held(["a#0"])["a#0"].embedding == [], "with 0 the index keeps no vectors"


async def test_another_replicas_writes_reach_the_scan_with_their_vectors() -> None:
    first_store, _, _, shared = await synced()
    second_store, second, second_sync = keyword_indexed(CountingStore(shared_with=shared), exact_max_chunks=100)
    await second_sync.refresh()
    second.build()
    assert [cid for cid, _ in await second_store.nearest(embedding=bag_of_words("cherry jam"), top_k=1)] == ["d#0"]
    await first_store.upsert([chunk("e", "cherry jam tarts")])
    await first_store.delete(doc_id="d")
    await second_sync.refresh()
    second.build()
    found = await second_store.nearest(embedding=bag_of_words("cherry jam"), top_k=1)
    assert [cid for cid, _ in found] == ["e#0"]
    assert second_store.inner.nearest_calls == 0
    assert second.held(["e#0"])["e#0"].embedding == pytest.approx(bag_of_words("cherry jam tarts"))


async def test_a_chunk_another_replica_moved_out_of_a_filter_is_not_returned_for_it_before_the_rebuild() -> None:
    """Between reading another replica's change and building it in, the scan's masks are the last build's:
    a chunk whose category changed would be returned for its old category, showing its new one."""
    first_store, _, _, shared = await synced()
    second_store, second, second_sync = keyword_indexed(CountingStore(shared_with=shared), exact_max_chunks=100)
    await second_sync.refresh()
    second.build()
    pears, where = bag_of_words("pears in syrup"), {"category": "c"}
    assert [cid for cid, _ in await second_store.nearest(embedding=pears, top_k=3, where=where)] == ["c#0"]
    moved = StoredChunk("c#0", "c", TEXTS["c"], bag_of_words(TEXTS["c"]), {"chunk_index": 0, "category": "tinned"})
    await first_store.upsert([moved])
    await second_sync.refresh()  # read, not yet built in
    assert await second_store.nearest(embedding=pears, top_k=3, where=where) == []
    assert second_store.inner.nearest_calls == 0


def test_duplicate_chunks_score_alike_whether_a_query_is_alone_or_batched() -> None:
    """A matrix product rounds each row by its position and by how many queries share it: copies of one
    paragraph scored 1e-8 apart, so their order flipped between a lone query and a batched one."""
    vectors = unit_rows(7, dimensions=384, seed=5)
    vectors[[2, 4, 6]] = vectors[5]  # copies among other rows, at odd and even positions
    dense = ExactDense([f"c{i}" for i in range(len(vectors))], vectors)
    queries = unit_rows(50, dimensions=384, seed=6)
    batched = dense.nearest(queries, 7)
    for query, in_batch in zip(queries, batched):
        (alone,) = dense.nearest(query[None, :], 7)
        copies = [d for cid, d in alone if cid in ("c2", "c4", "c5", "c6")]
        assert len(set(copies)) == 1, "copies of one vector score alike"
        assert [cid for cid, _ in alone] == [cid for cid, _ in in_batch], "copies keep their row order, alone or batched"
