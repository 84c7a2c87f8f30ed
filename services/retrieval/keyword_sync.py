"""Keep the in-memory keyword index equal to the vector store, which is the source of truth.

The index may also hold the chunks' vectors; the synced store then answers nearest-neighbour queries, filtered
or not, with an exact scan of them instead of asking the store (adapters/exact_dense.py).

Two paths: writes through this replica go through `SyncedStore` and reach the index at once; writes
through other replicas are found by polling the store's change feed (`VectorStore.changes`) and the
documents they touched are read back. A full reload happens at start, after the store was
unreachable, and every `full_reload_s` as a safety net.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from shared.filters import Filter, parse_filter
from services.retrieval.ports import StoredChunk, VectorStore
from shared.errors import DependencyUnavailable

log = logging.getLogger("cairn.retrieval.keywords")


class SyncableIndex(Protocol):
    """What KeywordSync needs of an index (adapters.bm25_index.Bm25Index)."""

    generation: int
    dirty: bool
    last_build_s: float

    def add(self, chunks: Sequence[StoredChunk]) -> None: ...

    def remove(self, doc_id: str, *, from_chunk_index: int = 0) -> None: ...

    def load(self, chunks: Sequence[StoredChunk], *, doc_ids: Iterable[str] | None, since: int) -> set[str]: ...

    def build(self) -> None: ...

    @property
    def keeps_vectors(self) -> bool:
        """Whether the index keeps the chunks' vectors, so the store must be read with them."""


class ExactScan(Protocol):
    """A scan over every chunk's vector (adapters.exact_dense.ExactDense)."""

    @property
    def dimensions(self) -> int: ...


class ExactIndex(SyncableIndex, Protocol):
    """An index that may hold the chunks' vectors."""

    def exact_dense(self) -> ExactScan | None:
        """The scan over the store's chunks as last read, or None when it cannot stand in for the store."""

    def exact_dense_matching(self, where: Filter) -> tuple[ExactScan, Any] | None:
        """The scan, as exact_dense, with a mask of its rows that `where` lets through."""

    def still_matching(self, hits: list[tuple[str, float]], where: Filter) -> list[tuple[str, float]]:
        """The hits whose chunks, as held now, `where` still lets through."""


class ExactSearcher(Protocol):
    """Runs queries over an ExactScan (adapters.exact_dense.ExactSearch)."""

    async def nearest(
        self, dense: Any, *, embedding: Sequence[float], top_k: int, allowed: Any = None
    ) -> list[tuple[str, float]]: ...


class KeywordSync:
    """Polls the store's change feed and applies other writers' changes to the index."""

    def __init__(
        self,
        *,
        store: VectorStore,
        index: SyncableIndex,
        interval_s: float = 1.0,
        full_reload_s: float = 600.0,
    ) -> None:
        if interval_s <= 0 or full_reload_s <= 0:
            raise ValueError("interval_s and full_reload_s must be > 0")
        self._store, self._index = store, index
        self._interval_s, self._full_reload_s = interval_s, full_reload_s
        self._cursor: object | None = None
        self._pending: set[str] = set()
        self._last_full = 0.0
        self._last_build = 0.0

    def mark_stale(self, doc_ids: Iterable[str]) -> None:
        """Read these documents back from the store at the next refresh (e.g. after a failed write)."""
        self._pending.update(doc_ids)

    async def refresh(self) -> None:
        """One round: read what changed and apply it. Raises DependencyUnavailable when the store fails."""
        if time.monotonic() - self._last_full > self._full_reload_s:
            self._cursor = None
        since = self._index.generation
        try:
            changed, cursor = await self._store.changes(self._cursor)
            if changed is None:
                started = time.perf_counter()
                self._pending.clear()
                chunks = await self._store.get_chunks(with_embeddings=self._index.keeps_vectors)
                skipped = await asyncio.to_thread(self._index.load, chunks, doc_ids=None, since=since)
                self._last_full = time.monotonic()
                self._pending |= skipped
                log.info("keyword index reloaded", extra={"chunks": len(chunks), "took_s": round(time.perf_counter() - started, 3)})
            elif wanted := sorted(changed | self._pending):
                self._pending.difference_update(wanted)
                chunks = await self._store.get_chunks(doc_ids=wanted, with_embeddings=self._index.keeps_vectors)
                self._pending |= await asyncio.to_thread(self._index.load, chunks, doc_ids=wanted, since=since)
        except DependencyUnavailable:
            self._cursor = None  # the change feed may have moved on while we could not read it
            raise
        self._cursor = cursor

    async def maybe_build(self) -> None:
        """Rebuild a stale index in the background; idle at least as long as the last build took, so
        a stream of changes from other replicas costs at most about half a core."""
        if self._index.dirty and time.monotonic() - self._last_build >= self._index.last_build_s:
            await asyncio.to_thread(self._index.build)
            self._last_build = time.monotonic()

    async def run(self) -> None:
        """Refresh forever (a background task); failures are logged and retried."""
        failing = False
        while True:
            try:
                await self.refresh()
                if failing:
                    log.info("keyword index sync recovered")
                failing = False
            except DependencyUnavailable:
                if not failing:
                    log.warning("keyword index sync: chroma unavailable, retrying")
                failing = True
            except Exception:  # never let the task die: the index would silently go stale
                log.exception("keyword index sync failed")
            # Also when the store is down: this replica's last writes need no store to be built, and until
            # they are, unfiltered dense searches cannot be answered from memory.
            try:
                await self.maybe_build()
            except Exception:
                log.exception("keyword index build failed")
            await asyncio.sleep(self._interval_s)


class SyncedStore:
    """A VectorStore whose writes also reach the keyword index, and whose nearest-neighbour queries the
    index's exact scan answers when it has one (`exact`); everything else passes through.

    Filtered queries too: the index holds every chunk's metadata, and the scan's answer is exact where
    Chroma's filtered search is approximate, and where a Chroma server's misses chunks after many
    deletes and updates (chroma-core/chroma#7758, seen with 1.5.9)."""

    def __init__(
        self, inner: VectorStore, *, index: ExactIndex, sync: KeywordSync, exact: ExactSearcher | None = None
    ) -> None:
        self._inner, self._index, self._sync, self._exact = inner, index, sync, exact

    @property
    def inner(self) -> VectorStore:
        return self._inner

    @property
    def shared(self) -> bool:
        return self._inner.shared

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        try:
            await self._inner.upsert(chunks)
        except BaseException:
            self._sync.mark_stale({chunk.doc_id for chunk in chunks})  # the write may have landed
            raise
        await asyncio.to_thread(self._index.add, chunks)

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        try:
            deleted = await self._inner.delete(doc_id=doc_id, from_chunk_index=from_chunk_index)
        except BaseException:
            self._sync.mark_stale({doc_id})
            raise
        self._index.remove(doc_id, from_chunk_index=from_chunk_index)
        return deleted

    async def nearest(
        self, *, embedding: list[float], top_k: int, where: Filter | Mapping[str, Any] | None = None
    ) -> list[tuple[str, float]]:
        if self._exact is not None:
            conditions = parse_filter(where)
            scan = await self._exact_scan(conditions)
            if scan is not None and len(embedding) == scan[0].dimensions:
                dense, allowed = scan
                found = await self._exact.nearest(dense, embedding=embedding, top_k=top_k, allowed=allowed)
                # Another replica's change read since the build is not in the mask yet: checked on what is held now.
                return found if allowed is None else self._index.still_matching(found, conditions)
        return await self._inner.nearest(embedding=embedding, top_k=top_k, where=where)

    async def _exact_scan(self, where: Filter) -> tuple[ExactScan, Any] | None:
        if not where:
            dense = self._index.exact_dense()
            return None if dense is None else (dense, None)
        # Off the event loop: the first search with a filter after a build reads every chunk's metadata.
        return await asyncio.to_thread(self._index.exact_dense_matching, where)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
