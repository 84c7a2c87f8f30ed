"""Two replicas on one store: each applies its own writes at once and the other's at its next refresh."""
from __future__ import annotations

import asyncio
import inspect

import pytest

from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.chroma_changes import CHANGES_KEPT_S
from services.retrieval.keyword_sync import KeywordSync
from services.retrieval.ports import StoredChunk
from shared.errors import DependencyUnavailable
from tests.unit.retrieval.fakes import FakeStore

pytestmark = pytest.mark.unit


def chunk(doc_id: str, index: int, text: str) -> StoredChunk:
    return StoredChunk(f"{doc_id}#{index}", doc_id, text, [1.0], {"chunk_index": index, "content_hash": "h"})


def found(index, query: str) -> set[str]:
    return {hit.doc_id for hit in index.search_now(query=query, top_k=10)}


async def catch_up(sync, index) -> None:
    """One round of what KeywordSync.run does (which also waits between builds)."""
    await sync.refresh()
    index.build()


@pytest.fixture
async def replicas():
    first_store = FakeStore()
    first = keyword_indexed(first_store)
    second = keyword_indexed(FakeStore(shared_with=first_store))
    for _, _, sync in (first, second):
        await sync.refresh()
    return first, second


async def test_writes_reach_the_other_replica_at_its_next_refresh(replicas) -> None:
    (store1, index1, sync1), (store2, index2, sync2) = replicas
    await store1.upsert([chunk("a", 0, "apples and pears"), chunk("a", 1, "more pears")])
    assert found(index1, "pears") == {"a"} and found(index2, "pears") == set()
    await catch_up(sync2, index2)
    assert found(index2, "pears") == {"a"}

    await store2.delete(doc_id="a", from_chunk_index=1)
    await store2.upsert([chunk("a", 0, "plums now")])
    assert found(index2, "pears") == set() and found(index1, "plums") == set()
    await catch_up(sync1, index1)
    assert found(index1, "plums") == {"a"} and found(index1, "pears") == set()

    await store1.delete(doc_id="a")
    await catch_up(sync2, index2)
    assert found(index2, "plums") == set() and len(index2) == 0


async def test_searches_wait_for_own_writes_but_not_for_other_replicas_writes(replicas) -> None:
    (store1, index1, sync1), (store2, index2, sync2) = replicas
    await store1.upsert([chunk("a", 0, "apples")])
    assert found(index1, "apples") == {"a"}, "read your own writes"
    await catch_up(sync2, index2)
    await store1.upsert([chunk("b", 0, "bananas")])
    await sync2.refresh()
    assert index2.dirty and found(index2, "bananas") == set(), "served from the previous matrix meanwhile"
    index2.build()
    assert found(index2, "bananas") == {"b"}


async def test_own_writes_are_not_read_back(replicas) -> None:
    (store1, index1, sync1), _ = replicas
    await store1.upsert([chunk("a", 0, "apples")])
    reads: list[dict] = []
    inner = store1.inner
    original = inner.get_chunks

    async def counting(**kwargs):
        reads.append(kwargs)
        return await original(**kwargs)

    inner.get_chunks = counting
    await sync1.refresh()
    assert reads == []


async def test_after_the_store_was_unreachable_everything_is_reloaded(replicas) -> None:
    (store1, _, _), (store2, index2, sync2) = replicas
    store2.inner.available = False
    with pytest.raises(DependencyUnavailable):
        await sync2.refresh()
    await store1.upsert([chunk("b", 0, "bananas")])
    store1.inner.chunks["ghost#0"] = chunk("ghost", 0, "ghosts written without a change record")
    store2.inner.available = True
    await catch_up(sync2, index2)
    assert found(index2, "bananas") == {"b"} and found(index2, "ghosts") == {"ghost"}


async def test_a_failed_write_is_read_back_at_the_next_refresh(replicas) -> None:
    (store1, index1, sync1), _ = replicas
    store1.inner.available = False
    with pytest.raises(DependencyUnavailable):
        await store1.upsert([chunk("c", 0, "cherries")])
    store1.inner.available = True
    # The write did land after all (a timeout after Chroma applied it), without a change record.
    store1.inner.chunks["c#0"] = chunk("c", 0, "cherries")
    await catch_up(sync1, index1)
    assert found(index1, "cherries") == {"c"}


async def test_run_keeps_polling_through_failures(replicas) -> None:
    (store1, _, _), (store2, index2, _) = replicas
    sync = KeywordSync(store=store2.inner, index=index2, interval_s=0.01)
    task = asyncio.create_task(sync.run())
    try:
        store2.inner.available = False
        await asyncio.sleep(0.05)
        await store1.upsert([chunk("d", 0, "dates")])
        store2.inner.available = True
        for _ in range(200):  # no search meanwhile: run() itself must apply the change and rebuild
            if len(index2) == 1 and not index2.dirty:
                break
            await asyncio.sleep(0.01)
        assert len(index2) == 1 and not index2.dirty
        assert found(index2, "dates") == {"d"}
    finally:
        task.cancel()


async def test_own_writes_are_built_while_the_store_is_unreachable() -> None:
    """A write just before Chroma went down: run() builds it without Chroma, so that an unfiltered dense
    search, answered from the vectors held in memory, does not wait for Chroma to come back."""
    store = FakeStore()
    synced, index, sync = keyword_indexed(store, interval_s=0.01, exact_max_chunks=100)
    await sync.refresh()
    await synced.upsert([chunk("a", 0, "apples")])
    store.available = False
    task = asyncio.create_task(sync.run())
    try:
        for _ in range(200):  # no search meanwhile: run() itself must build
            if not index.dirty:
                break
            await asyncio.sleep(0.01)
        assert await synced.nearest(embedding=[1.0], top_k=1) == [("a#0", pytest.approx(0.0, abs=1e-6))]
    finally:
        task.cancel()


def test_intervals_are_checked() -> None:
    with pytest.raises(ValueError):
        KeywordSync(store=FakeStore(), index=None, interval_s=0)


def test_a_replica_reloads_its_whole_index_before_the_changes_it_missed_are_pruned() -> None:
    """A replica that could not read the change feed for longer than its records are kept misses changes;
    only the periodic full reload, sooner than that, brings them back."""
    reload_s = inspect.signature(KeywordSync).parameters["full_reload_s"].default
    assert 0 < reload_s < CHANGES_KEPT_S
