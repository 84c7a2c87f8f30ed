"""An Embedder over any synchronous encoder: one worker thread, micro-batched queries, an LRU of queries.

The encoder runs only on the embedder's single worker thread, so the event loop never waits on the model
and the model never runs twice at once. Queries and documents are batched separately, each with at most
one batch queued on the worker: a query therefore waits for at most one document batch, however large
the ingest. Document texts from concurrent ingests are merged, sorted by length and encoded in calls of
`batch_size` texts of similar length: a call pads every text to its longest, so chunks taken in document
order wasted about a third of the encode on padding.
"""
from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from services.retrieval import metrics
from services.retrieval.microbatch import MicroBatcher

# Document texts gathered for one length sort: this many encode calls' worth.
DOCUMENT_CALLS_PER_SORT = 4
# Most queries in one encode call. A micro-batch of 32 SciFact queries padded to its longest was 42 %
# padding; sorted by length and encoded 16 at a time by PyTorch it took 22-27 % less time per query than
# in one call (8 at a time: about the same as 16; 4: slower, the matrix products too small). The torch
# backend now runs such a call one query at a time through its ONNX copy (adapters/embedder.py).
QUERIES_PER_CALL = 16


class Encoder(Protocol):
    """A loaded embedding model."""

    model_name: str
    backend: str

    @property
    def max_tokens(self) -> int:
        """Longest input (without special tokens) the model embeds without truncation."""

    def encode(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors, in order. Called from one thread at a time (the embedder's worker)."""

    def count_tokens(self, text: str) -> int:
        """Model tokens in `text`, special tokens excluded. Safe to call from any thread."""


class BatchingEmbedder:
    """Implements the Embedder protocol (ports.py) on top of an Encoder.

    `encoder` may be a loader, called on the worker thread. Give one for a model with an OpenMP pool
    (PyTorch): each thread that runs parallel work gets a pool of its own, and with two pools on two cores
    a query encode measured twice as slow, because OpenMP then stops spinning and sleeps between steps.
    """

    def __init__(
        self,
        encoder: Encoder | Callable[[], Encoder],
        *,
        batch_size: int = 64,
        cache_size: int = 1024,
        batch_window_ms: float = 0.0,
        max_query_batch: int = 32,
    ) -> None:
        if batch_size < 1 or max_query_batch < 1:
            raise ValueError("batch_size and max_query_batch must be >= 1")
        if cache_size < 0 or batch_window_ms < 0:
            raise ValueError("cache_size and batch_window_ms must be >= 0")
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        if not hasattr(encoder, "encode"):
            try:
                encoder = self._executor.submit(encoder).result()
            except BaseException:
                self._executor.shutdown(wait=False)
                raise
        self.encoder = encoder
        self.model_name = encoder.model_name
        self.backend = encoder.backend
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._cache_size = cache_size
        self._batch_size = batch_size
        self.queries: MicroBatcher[str, list[float]] = MicroBatcher(
            self._encode_queries, window_s=batch_window_ms / 1000, max_batch=max_query_batch, name="query_encode"
        )
        # No window for documents: an ingest has all its texts at once, and a late one joins the next batch.
        self.documents: MicroBatcher[str, list[float]] = MicroBatcher(
            self._encode_documents, window_s=0, max_batch=batch_size * DOCUMENT_CALLS_PER_SORT, name="document_encode"
        )
        self.cache_hits = 0

    @property
    def max_tokens(self) -> int:
        return self.encoder.max_tokens

    def count_tokens(self, text: str) -> int:
        return self.encoder.count_tokens(text)

    async def _encode(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.encoder.encode, texts)

    async def _encode_queries(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._encode_by_length, texts)

    def _encode_by_length(self, texts: list[str]) -> list[list[float]]:
        """On the worker: `texts` encoded QUERIES_PER_CALL at a time, shortest first, in their order."""
        vectors: list[list[float]] = [[] for _ in texts]
        for group in _length_groups(texts, QUERIES_PER_CALL):
            for index, vector in zip(group, self.encoder.encode([texts[i] for i in group]), strict=True):
                vectors[index] = vector
        return vectors

    async def _encode_documents(self, texts: list[str]) -> list[list[float]]:
        # Each call is queued on the worker on its own, so a query waits for one call, not all of them.
        vectors: list[list[float]] = [[] for _ in texts]
        for group in _length_groups(texts, self._batch_size, longest_first=True):
            for index, vector in zip(group, await self._encode([texts[i] for i in group]), strict=True):
                vectors[index] = vector
        return vectors

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return await self.documents.submit_many(texts) if texts else []

    async def embed_query(self, text: str) -> list[float]:
        if (cached := self._cache.get(text)) is not None:
            self._cache.move_to_end(text)
            self.cache_hits += 1
            metrics.cache_lookups("query", hits=1)
            return cached
        metrics.cache_lookups("query", misses=1)
        vector = await self.queries.submit(text)
        if self._cache_size:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vector

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _length_groups(texts: list[str], size: int, *, longest_first: bool = False) -> list[list[int]]:
    """Indices of `texts` sorted by length and cut into groups of `size`: one encode call pads its texts
    to the longest, so texts of similar length go together."""
    by_length = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=longest_first)
    return [by_length[start : start + size] for start in range(0, len(by_length), size)]
