"""How much of the exact top-k the store's approximate (HNSW) search returns, and how fast it answers."""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from services.retrieval.evaluation.runner import percentiles
from services.retrieval.ports import VectorStore

# Vectors are float32: similarities this close count as a tie at the k-th place.
_TIE = 1e-6


@dataclass(frozen=True)
class AnnReport:
    k: int
    recall: float  # mean share of the exact top-k that the store returned
    chunks: int
    queries: int
    query_ms: dict[str, float]  # p50, p95 of the store's nearest-neighbour query alone (ids and distances, as search asks)


async def ann_recall(
    *,
    queries: list[str],
    embed_query: Callable[[str], Awaitable[list[float]]],
    store: VectorStore,
    embeddings: dict[str, list[float]],
    k: int = 10,
) -> AnnReport:
    """Exact top-k by brute force (numpy, cosine on unit vectors) against the store's approximate top-k.

    A returned chunk counts when it is at least as similar as the exact k-th, so chunks with identical
    vectors (duplicate text) do not count as misses.
    """
    if not embeddings or not queries:
        raise ValueError("need stored embeddings and queries")
    ids = list(embeddings)
    position = {chunk_id: i for i, chunk_id in enumerate(ids)}
    matrix = np.asarray([embeddings[i] for i in ids], dtype=np.float32)
    k = min(k, len(ids))
    # Every query is encoded first, so the store's queries are timed alone: right after an encode, the
    # model's threads still hold the CPU for a while.
    vectors = [await embed_query(query) for query in queries]
    recalls, latencies = [], []
    for vector in vectors:
        similarities = matrix @ np.asarray(vector, dtype=np.float32)
        kth = np.partition(similarities, len(ids) - k)[len(ids) - k]
        started = time.perf_counter()
        nearest = await store.nearest(embedding=vector, top_k=k)
        latencies.append((time.perf_counter() - started) * 1000)
        found = sum(1 for chunk_id, _ in nearest if chunk_id in position and similarities[position[chunk_id]] >= kth - _TIE)
        recalls.append(min(found, k) / k)
    return AnnReport(
        k=k, recall=float(np.mean(recalls)), chunks=len(ids), queries=len(queries), query_ms=percentiles(latencies)
    )
