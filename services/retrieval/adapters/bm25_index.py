"""BM25 over the stored chunks, in memory (bm25s), with English stopwords and a Snowball stemmer.

The index can also keep each chunk's vector, for an exact dense scan of a collection small enough to
scan (adapters/exact_dense.py), built with the BM25 matrix from the same rows.

The BM25 matrix is rebuilt from cached token ids after changes (bm25s has no incremental update:
document frequencies and lengths are global). A search waits for that rebuild only when this
replica itself wrote since the last one (read your own writes); changes read from other replicas are
built in the background while searches use the previous matrix (searches wait for the first build
after a load: before it there is no matrix). Keeping the index equal to the
store, across replicas too, is services.retrieval.keyword_sync's job.

Terms get vocabulary ids as they are first seen. A build compacts the vocabulary once most of its terms
belong to no chunk any more, so a replica serving documents that keep changing (new names, numbers,
identifiers) does not grow without end.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import bm25s
import numpy as np
import regex
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from services.retrieval.adapters.exact_dense import ExactDense, ExactSearch
from services.retrieval.adapters.heap import release_free_memory
from services.retrieval.adapters.top_rows import best_rows
from shared.filters import Filter, matches
from services.retrieval.keyword_sync import KeywordSync, SyncedStore
from services.retrieval.ports import KeywordHit, MetadataValue, StoredChunk, VectorStore, indexed_text
from shared.cjk import folded, split_cjk
from shared.errors import DependencyUnavailable

__all__ = ["Bm25Index", "keyword_indexed", "tokenize"]

# bm25s's own default pattern: words of two or more letters or digits. The regex module's \w, unlike re's,
# takes in combining marks: the vowel signs and viramas inside every Devanagari, Bengali or Tamil word.
_WORD = regex.compile(r"\b\w\w+\b")
_STOPWORDS = frozenset(STOPWORDS_EN)
_local = threading.local()  # a Stemmer object must not be shared between threads
_VOCAB_SLACK = 4096  # vocabulary terms beyond twice the live ones before a build counts them
_T = TypeVar("_T")


def tokenize(text: str) -> list[str]:
    """Lower-cased words, English stopwords dropped, Snowball-stemmed: the same for chunks and queries.
    Chinese, Japanese and Korean text gives pairs of adjacent characters instead (shared/cjk.py)."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    rest, cjk_terms = split_cjk(folded(text))
    return stemmer.stemWords([w for w in _WORD.findall(rest) if w not in _STOPWORDS]) + cjk_terms


@dataclass(frozen=True)
class _Entry:
    doc_id: str
    content: str
    metadata: dict[str, MetadataValue]
    text: str  # what was tokenised (contextual prefix + content)
    terms: np.ndarray  # vocabulary ids, int32
    vector: np.ndarray | None  # float32, kept only for the exact dense scan

    def field(self, key: str) -> MetadataValue | None:
        """What a filter on `key` reads: the metadata, and the chunk's doc_id under "doc_id"."""
        return self.doc_id if key == "doc_id" else self.metadata.get(key)

    def matches(self, where: Filter) -> bool:
        return matches(where, self.metadata | {"doc_id": self.doc_id})


@dataclass(frozen=True)
class _Built:
    bm25: bm25s.BM25 | None
    rows: list[tuple[str, _Entry]]  # row of the score matrix -> chunk
    vocab: dict[str, int]  # term -> column of the score matrix
    dense: ExactDense | None = None
    masks: dict[tuple, np.ndarray] = field(default_factory=dict)  # the rows each recent filter lets through


_KEPT_MASKS = 64  # filters whose rows each build remembers: computing them reads every chunk's metadata


class Bm25Index:
    """Implements ports.KeywordIndex. Mutations are thread-safe; `search` rebuilds first when stale.

    `exact_max_chunks`: keep the chunks' vectors and build an exact dense scan over them while the index
    holds at most this many chunks (0: keep no vectors).
    """

    def __init__(self, *, k1: float = 1.5, b: float = 0.75, exact_max_chunks: int = 0) -> None:
        if exact_max_chunks < 0:
            raise ValueError("exact_max_chunks must be >= 0")
        self._k1, self._b = k1, b
        self.exact_max_chunks = exact_max_chunks
        self._entries: dict[str, _Entry] = {}
        self._by_doc: dict[str, set[str]] = {}
        self._vocab: dict[str, int] = {}  # term -> id, ids in insertion order
        self._vocab_epoch = 0  # bumped when a compaction renumbers the ids
        self._live_terms = 0  # terms in use when the vocabulary was last counted
        self._preparing_again = 0  # writes a compaction made stale, being prepared again: no compaction meanwhile
        self._touched: dict[str, int] = {}  # doc_id -> generation of its last local change
        self._generation = 0
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._masks_lock = threading.Lock()
        self._built = _Built(None, [], {})
        self._dirty = False
        self._local_changes = False  # written through this replica since the last build
        self._building_local = False  # a build that includes this replica's writes is under way
        self.loaded = False
        self.last_build_s = 0.0

    # -- changes -------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """A counter of local changes; pass it to `load` as `since`."""
        return self._generation

    @property
    def dirty(self) -> bool:
        return self._dirty

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def vocabulary_size(self) -> int:
        """Terms holding an id: every term of the chunks held, and those of chunks gone since the last compaction."""
        return len(self._vocab)

    def add(self, chunks: Sequence[StoredChunk]) -> None:
        """A local upsert: index (or re-index) these chunks now."""

        def commit(prepared: list[tuple[str, _Entry]]) -> None:
            self._generation += 1
            for chunk_id, entry in prepared:
                self._put(chunk_id, entry)
                self._touched[entry.doc_id] = self._generation
            self._dirty = self._local_changes = True

        self._write(lambda: self._prepare(chunks, previous={}), commit)

    def remove(self, doc_id: str, *, from_chunk_index: int = 0) -> None:
        """A local delete of a document's chunks with chunk_index >= from_chunk_index."""
        with self._lock:
            self._generation += 1
            for chunk_id in list(self._by_doc.get(doc_id, ())):
                if int(self._entries[chunk_id].metadata.get("chunk_index", 0)) >= from_chunk_index:
                    self._drop(chunk_id)
            self._touched[doc_id] = self._generation
            self._dirty = self._local_changes = True

    def load(self, chunks: Sequence[StoredChunk], *, doc_ids: Iterable[str] | None, since: int) -> set[str]:
        """Make the given documents (None: all) hold exactly `chunks`, as read from the store.

        Documents changed locally after generation `since` are left alone, since the read may predate
        that change; their ids are returned so the caller can read them again.
        """

        def prepare() -> list[tuple[str, _Entry]]:
            with self._lock:
                previous = dict(self._entries)
            return self._prepare(chunks, previous=previous)

        return self._write(prepare, lambda prepared: self._replace_loaded(prepared, doc_ids=doc_ids, since=since))

    def _write(
        self, prepare: Callable[[], list[tuple[str, _Entry]]], commit: Callable[[list[tuple[str, _Entry]]], _T]
    ) -> _T:
        """Prepare a write (term ids) outside the lock, then commit it under the lock. A write prepared while
        a compaction renumbered the terms is prepared again, and no compaction runs until it is in: a long
        write bringing many new terms (a reload) would otherwise push the vocabulary over the threshold
        itself, and be compacted away again by every build that other writes bring."""
        again = False
        try:
            while True:
                with self._lock:
                    epoch = self._vocab_epoch
                prepared = prepare()
                with self._lock:
                    if epoch == self._vocab_epoch:
                        return commit(prepared)
                    if not again:
                        again = True
                        self._preparing_again += 1
        finally:
            if again:
                with self._lock:
                    self._preparing_again -= 1

    def _replace_loaded(
        self, prepared: list[tuple[str, _Entry]], *, doc_ids: Iterable[str] | None, since: int
    ) -> set[str]:
        """`load`'s update, under self._lock."""
        skipped = {doc for doc, generation in self._touched.items() if generation > since}
        scope = set(self._by_doc) if doc_ids is None else set(doc_ids)
        for doc_id in scope - skipped:
            for chunk_id in list(self._by_doc.get(doc_id, ())):
                self._drop(chunk_id)
        for chunk_id, entry in prepared:
            if entry.doc_id not in skipped and (doc_ids is None or entry.doc_id in scope):
                self._put(chunk_id, entry)
        self._touched = {doc: g for doc, g in self._touched.items() if g > since}
        self._dirty = True
        self.loaded = True
        return skipped

    def _prepare(self, chunks: Sequence[StoredChunk], *, previous: dict[str, _Entry]) -> list[tuple[str, _Entry]]:
        prepared = []
        for chunk in chunks:
            text = indexed_text(chunk.content, chunk.metadata)
            old = previous.get(chunk.chunk_id)
            if old is not None and old.text == text:
                if self._holds(old, chunk):
                    prepared.append((chunk.chunk_id, old))  # see _holds
                    continue
                terms = old.terms  # unchanged text: skip the stemmer
            else:
                terms = self._term_ids(tokenize(text))
            # A copy: a row read from the store would keep its whole page alive.
            vector = np.array(chunk.embedding, dtype=np.float32) if self.keeps_vectors and len(chunk.embedding) else None
            prepared.append((chunk.chunk_id, _Entry(chunk.doc_id, chunk.content, dict(chunk.metadata), text, terms, vector)))
        return prepared

    def _holds(self, entry: _Entry, chunk: StoredChunk) -> bool:
        """Whether `entry`, of the same text, already holds `chunk` as just read. A full reload then keeps the
        entry: allocating every chunk anew, among the read's own short-lived objects, left the heap too
        fragmented to hand back."""
        if (entry.doc_id, entry.content, entry.metadata) != (chunk.doc_id, chunk.content, chunk.metadata):
            return False
        if not self.keeps_vectors or not len(chunk.embedding):
            return entry.vector is None
        return entry.vector is not None and np.array_equal(entry.vector, np.asarray(chunk.embedding, dtype=np.float32))

    def _term_ids(self, tokens: list[str]) -> np.ndarray:
        with self._lock:
            vocab = self._vocab
            return np.fromiter((vocab.setdefault(t, len(vocab)) for t in tokens), dtype=np.int32, count=len(tokens))

    def _put(self, chunk_id: str, entry: _Entry) -> None:
        old = self._entries.get(chunk_id)
        if old is not None and old.doc_id != entry.doc_id:
            self._by_doc[old.doc_id].discard(chunk_id)
        self._entries[chunk_id] = entry
        self._by_doc.setdefault(entry.doc_id, set()).add(chunk_id)

    def _drop(self, chunk_id: str) -> None:
        entry = self._entries.pop(chunk_id)
        chunks = self._by_doc[entry.doc_id]
        chunks.discard(chunk_id)
        if not chunks:
            del self._by_doc[entry.doc_id]

    def _compact_vocabulary(self) -> None:
        """Under self._lock: count the terms chunks still use and, when they are at most half the
        vocabulary, renumber them 0..n-1 and drop the rest. Counting runs once the vocabulary has doubled
        since the last count, so its cost stays in proportion to the terms added."""
        entries = self._entries
        used = np.zeros(len(self._vocab), dtype=bool)
        for entry in entries.values():
            used[entry.terms] = True
        live = np.flatnonzero(used)
        self._live_terms = len(live)
        if 2 * len(live) > len(self._vocab):
            return
        new_ids = np.full(len(self._vocab), -1, dtype=np.int32)
        new_ids[live] = np.arange(len(live), dtype=np.int32)
        terms = list(self._vocab)  # ids are insertion order
        self._vocab = {terms[old]: new for new, old in enumerate(live.tolist())}
        self._entries = {chunk_id: replace(e, terms=new_ids[e.terms]) for chunk_id, e in entries.items()}
        self._vocab_epoch += 1

    # -- building and searching ----------------------------------------------------------------

    def build(self) -> None:
        """Rebuild the BM25 matrix if anything changed since the last build."""
        with self._build_lock:
            with self._lock:
                if not self._dirty:
                    return
                if len(self._vocab) > 2 * self._live_terms + _VOCAB_SLACK and not self._preparing_again:
                    self._compact_vocabulary()
                rows = sorted(self._entries.items())
                vocab = dict(self._vocab)
                self._building_local = self._local_changes
                self._dirty = self._local_changes = False
            started = time.perf_counter()
            try:
                bm25 = None
                if rows and vocab:
                    bm25 = bm25s.BM25(k1=self._k1, b=self._b)
                    corpus = [entry.terms.tolist() for _, entry in rows]
                    bm25.index((corpus, vocab), create_empty_token=False, show_progress=False)
                dense = None
                if len(rows) <= self.exact_max_chunks:
                    dense = ExactDense.of([chunk_id for chunk_id, _ in rows], [entry.vector for _, entry in rows])
                self._built = _Built(bm25, rows, vocab, dense)
            finally:
                self._building_local = False
            release_free_memory()  # the old index and the build's scratch: see heap.py
            self.last_build_s = time.perf_counter() - started

    def search_now(self, *, query: str, top_k: int, where: Filter | None = None) -> list[KeywordHit]:
        """The synchronous search (rebuilding first when stale)."""
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        if not self.loaded:
            raise DependencyUnavailable("chroma", "the keyword index has not been loaded from chroma yet")
        # Also the first build after a load (the service is ready once loaded and builds in the background):
        # until it ends, the matrix is the empty one of before the load.
        first_build = not self._built.rows and (self._dirty or self._build_lock.locked())
        if self._local_changes or self._building_local or first_build:
            self.build()  # also waits for a build under way, by another search or in the background
        built = self._built
        ids = sorted({built.vocab[t] for t in tokenize(query) if t in built.vocab})
        if built.bm25 is None or not ids:
            return []
        scores = built.bm25.get_scores_from_ids(ids)
        candidates = np.flatnonzero(scores > 0)
        # With a filter every candidate is ranked: those it refuses leave room for ones further down.
        ordered = candidates[best_rows(scores[candidates], len(candidates) if where else top_k)]
        hits: list[KeywordHit] = []
        for row in ordered:
            chunk_id, entry = built.rows[row]
            if where and not entry.matches(where):
                continue
            hits.append(KeywordHit(chunk_id, entry.doc_id, entry.content, float(scores[row]), dict(entry.metadata)))
            if len(hits) == top_k:
                break
        return hits

    async def search(self, *, query: str, top_k: int, where: Filter | None = None) -> list[KeywordHit]:
        return await asyncio.to_thread(self.search_now, query=query, top_k=top_k, where=where)

    @property
    def keeps_vectors(self) -> bool:
        return self.exact_max_chunks > 0

    def exact_dense(self) -> ExactDense | None:
        """The exact dense scan over every chunk of the store as this replica last read it, or None: vectors
        not kept, more chunks than exact_max_chunks, or this replica's own writes not yet built in (the
        store has them; a search must see them)."""
        built = self._exact_built()
        return None if built is None else built.dense

    def exact_dense_matching(self, where: Filter) -> tuple[ExactDense, np.ndarray] | None:
        """The exact dense scan, as `exact_dense`, with a mask of its rows that `where` lets through (the
        first search with a filter after a build reads every chunk's metadata: 5-15 ms at 20,000)."""
        built = self._exact_built()
        if built is None or built.dense is None:
            return None
        key = _typed(where)
        mask = built.masks.get(key)
        if mask is None:
            mask = _rows_matching(where, built.rows)
            with self._masks_lock:
                if len(built.masks) >= _KEPT_MASKS:
                    del built.masks[next(iter(built.masks))]
                built.masks[key] = mask
        return built.dense, mask

    def still_matching(self, hits: list[tuple[str, float]], where: Filter) -> list[tuple[str, float]]:
        """The hits whose chunks, as held now, `where` still lets through: a change another replica made is
        held once read, and in the masks only once built in."""
        entries = self._entries  # single lookups are safe beside the writers' lock-held updates
        return [
            (chunk_id, distance)
            for chunk_id, distance in hits
            if (entry := entries.get(chunk_id)) is not None and entry.matches(where)
        ]

    def _exact_built(self) -> _Built | None:
        if not self.loaded or self._local_changes or self._building_local:
            return None
        return self._built

    def held(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]:
        entries = self._entries  # single lookups are safe beside the writers' lock-held updates
        found = {}
        for chunk_id in chunk_ids:
            if (entry := entries.get(chunk_id)) is not None:
                vector = entry.vector if entry.vector is not None else []
                found[chunk_id] = StoredChunk(chunk_id, entry.doc_id, entry.content, vector, dict(entry.metadata))
        return found


def _typed(where: Filter) -> tuple:
    """`where` as a key that tells {"flag": True} from {"flag": 1}: the two filters compare equal, yet
    a boolean matches only booleans."""

    def typed(value: object) -> object:
        return tuple(typed(v) for v in value) if isinstance(value, tuple) else (type(value), value)

    return tuple((c.key, c.op, typed(c.value)) for c in where.conditions)


def _rows_matching(where: Filter, rows: list[tuple[str, _Entry]]) -> np.ndarray:
    """Which rows `where` lets through. Each condition is checked once per distinct value of its key, not once
    per chunk: most keys hold few values, and 20,000 chunks checked one by one took 50 ms."""
    mask = np.ones(len(rows), dtype=bool)
    for condition in where.conditions:
        key, alone = condition.key, Filter((condition,))
        values = (entry.field(key) for _, entry in rows)
        typed = [(type(value), value) for value in values]  # True and 1 are equal keys, yet never match alike
        verdict = {kind_and_value: matches(alone, {key: kind_and_value[1]}) for kind_and_value in set(typed)}
        mask &= np.fromiter(map(verdict.__getitem__, typed), dtype=bool, count=len(rows))
    return mask


def keyword_indexed(
    store: VectorStore, *, interval_s: float = 1.0, exact_max_chunks: int = 0, max_scan_batch: int = 32
) -> tuple[SyncedStore, Bm25Index, KeywordSync]:
    """Wrap `store` so that its writes reach a new BM25 index; poll for other replicas' writes with
    `KeywordSync.run` (a background task) after a first `await sync.refresh()` loads the index.

    With `exact_max_chunks`, the index also keeps the vectors and, while it holds at most that many
    chunks, answers the wrapped store's unfiltered `nearest` queries by exact scan, `max_scan_batch` at a time.
    """
    index = Bm25Index(exact_max_chunks=exact_max_chunks)
    sync = KeywordSync(store=store, index=index, interval_s=interval_s)
    exact = ExactSearch(max_batch=max_scan_batch) if exact_max_chunks > 0 else None
    return SyncedStore(store, index=index, sync=sync, exact=exact), index, sync
