"""Search in three modes, with the same filters in each, and an optional cross-encoder rerank.

- dense: the query's nearest chunks by cosine similarity (score in [-1, 1]).
- keyword: BM25 over stemmed words (score = BM25).
- hybrid (default): reciprocal rank fusion of the top candidates of both (score = fused score).

Every hybrid result carries its cosine similarity in `dense_score`, computed for chunks that only
the keyword leg found, because callers (chat's relevance threshold) and `threshold` rely on it.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from services.retrieval import metrics
from shared.filters import Filter, parse_filter
from services.retrieval.fusion import reciprocal_rank_fusion
from services.retrieval.ports import (
    Embedder, KeywordHit, KeywordIndex, MetadataValue, Reranker, StoredChunk, VectorStore, indexed_text,
)
from shared.errors import ServiceError

log = logging.getLogger(__name__)

Mode = Literal["hybrid", "dense", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "dense", "keyword")


class RerankUnavailable(ServiceError):
    status_code = 422
    code = "rerank_unavailable"


@dataclass(frozen=True)
class SearchOptions:
    """How hybrid search and reranking behave (settings HYBRID_*, RRF_K, RERANK_CANDIDATES)."""

    candidates: int = 200  # chunks per leg, before fusion
    rrf_k: float = 60.0
    dense_weight: float = 1.0
    keyword_weight: float = 1.0
    rerank_candidates: int = 30

    def __post_init__(self) -> None:
        if self.candidates < 1 or self.rerank_candidates < 1 or self.rrf_k < 0:
            raise ValueError("candidates and rerank_candidates must be >= 1, rrf_k >= 0")
        if self.dense_weight < 0 or self.keyword_weight < 0:
            raise ValueError("weights must be >= 0")


@dataclass(frozen=True)
class SearchHit:
    chunk_id: str
    doc_id: str
    content: str
    score: float
    dense_score: float | None
    keyword_score: float | None
    metadata: dict[str, MetadataValue]
    dense_rank: int | None = None
    keyword_rank: int | None = None
    rerank_score: float | None = None


def _cosine(distance: float) -> float:
    # Cosine space: distance = 1 - cosine similarity.
    return max(-1.0, min(1.0, 1.0 - distance))


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return max(-1.0, min(1.0, float(np.dot(a, b))))


async def search(
    *,
    query: str,
    top_k: int,
    embedder: Embedder,
    store: VectorStore,
    keywords: KeywordIndex | None = None,
    threshold: float | None = None,
    mode: Mode = "hybrid",
    filters: Filter | dict[str, Any] | None = None,
    options: SearchOptions = SearchOptions(),
    reranker: Reranker | None = None,
    rerank: bool | None = None,
) -> list[SearchHit]:
    """Up to top_k chunks, best first.

    `threshold`: the minimum cosine similarity, in every mode (in keyword mode it costs a query
    encode). `rerank`: None = rerank when a reranker is given; True without one raises RerankUnavailable.
    With reranking, the first `options.rerank_candidates` results are reordered by `rerank_score`.
    """
    if top_k < 1:
        raise ValueError("top_k must be >= 1")
    if mode not in MODES:
        raise ValueError(f"unsupported search mode: {mode}")
    if mode != "dense" and keywords is None:
        raise ValueError(f"{mode} search needs a keyword index")
    if rerank and reranker is None:
        raise RerankUnavailable("rerank was requested but no RERANK_MODEL is configured")
    reranking = reranker is not None and rerank is not False
    where = parse_filter(filters)
    need = max(top_k, options.rerank_candidates) if reranking else top_k

    if mode == "dense":
        vector = await metrics.timed_stage("encode", embedder.embed_query(query))
        # Ids and distances only: reading content and metadata in the same Chroma call cost more than the
        # rest of the search together; the keyword index holds them in memory.
        nearest = await metrics.timed_stage("dense", store.nearest(embedding=vector, top_k=need, where=where))
        legs = _Legs(dense=nearest, keyword=[])
        ordered = [(chunk_id, cosine) for chunk_id, (_, cosine) in legs.dense.items()]
        completing = _complete(ordered, legs, vector=None, store=store, keywords=keywords, threshold=threshold, need=need)
        results = await metrics.timed_stage("fetch", completing)
    else:
        results = await _keyword_or_hybrid(
            query=query, mode=mode, need=need, where=where, threshold=threshold,
            embedder=embedder, store=store, keywords=keywords, options=options,  # type: ignore[arg-type]
        )

    if reranking and results:
        reranked = _rerank(results, query=query, reranker=reranker, depth=options.rerank_candidates)  # type: ignore[arg-type]
        results = await metrics.timed_stage("rerank", reranked)
    return results[:top_k]


async def _keyword_or_hybrid(
    *,
    query: str,
    mode: Mode,
    need: int,
    where: Filter,
    threshold: float | None,
    embedder: Embedder,
    store: VectorStore,
    keywords: KeywordIndex,
    options: SearchOptions,
) -> list[SearchHit]:
    # With a threshold, keyword mode reads as deep as hybrid: hits under it leave room for those further down.
    depth = max(need, options.candidates) if mode == "hybrid" or threshold is not None else need
    vector: list[float] | None = None
    nearest: list[tuple[str, float]] = []

    def keyword_leg() -> Awaitable[list[KeywordHit]]:
        return metrics.timed_stage("keyword", keywords.search(query=query, top_k=depth, where=where))

    if mode == "hybrid":
        # The BM25 leg waits for the encode and then runs beside the dense lookup. Run beside the encode, it
        # took a core from the encode's two threads: one client, encode 5.8 -> 4.8 ms, BM25 3.3 -> 1.3 ms,
        # /search p50 0.4-1 ms lower (bench/README.md, "BM25 leg after the encode, again").
        vector = await metrics.timed_stage("encode", embedder.embed_query(query))
        # Ids and distances only: content is fetched below for the few chunks returned.
        dense_leg = metrics.timed_stage("dense", store.nearest(embedding=vector, top_k=depth, where=where))
        nearest, keyword_hits = await asyncio.gather(dense_leg, keyword_leg())
    else:
        keyword_hits = await keyword_leg()
        if threshold is not None:
            vector = await metrics.timed_stage("encode", embedder.embed_query(query))

    legs = _Legs(dense=nearest, keyword=keyword_hits)
    if mode == "hybrid":
        with metrics.stage_timer("fusion"):
            ordered = reciprocal_rank_fusion(
                {"dense": [chunk_id for chunk_id, _ in nearest], "keyword": [h.chunk_id for h in keyword_hits]},
                k=options.rrf_k,
                weights={"dense": options.dense_weight, "keyword": options.keyword_weight},
            )
    else:
        ordered = [(h.chunk_id, h.score) for h in keyword_hits]
    completing = _complete(ordered, legs, vector=vector, store=store, keywords=keywords, threshold=threshold, need=need)
    return await metrics.timed_stage("fetch", completing)


class _Legs:
    """What each leg returned, by chunk id; makes the SearchHit of a chunk only when it may be returned
    (a hybrid search fuses hundreds of candidates and returns ten)."""

    def __init__(self, *, dense: list[tuple[str, float]], keyword: list[KeywordHit]) -> None:
        self.dense = {chunk_id: (rank, _cosine(distance)) for rank, (chunk_id, distance) in enumerate(dense, start=1)}
        self.keyword = {hit.chunk_id: (rank, hit) for rank, hit in enumerate(keyword, start=1)}

    def hit(self, chunk_id: str, score: float) -> SearchHit:
        dense_rank, cosine = self.dense.get(chunk_id, (None, None))
        keyword_rank, found = self.keyword.get(chunk_id, (None, None))
        if found is None:  # content comes later (see _complete)
            return SearchHit(chunk_id, "", "", score, cosine, None, {}, dense_rank=dense_rank)
        return SearchHit(
            chunk_id, found.doc_id, found.content, score, cosine, found.score, found.metadata,
            dense_rank=dense_rank, keyword_rank=keyword_rank,
        )


async def _complete(
    ordered: list[tuple[str, float]],
    legs: _Legs,
    *,
    vector: list[float] | None,
    store: VectorStore,
    keywords: KeywordIndex | None,
    threshold: float | None,
    need: int,
) -> list[SearchHit]:
    """The first `need` of the (chunk id, score) pairs in `ordered` whose cosine passes `threshold`, as
    hits with their content and, when `vector` is given, their dense_score. Content a leg did not supply
    comes from the keyword index, else from the store; so do the embeddings of keyword-only hits (the index
    holds them when it keeps vectors for exact search). The
    store is read in one call per window, and only for the chunks that may be returned."""
    results: list[SearchHit] = []
    position = 0
    while position < len(ordered) and len(results) < need:
        window = [legs.hit(chunk_id, score) for chunk_id, score in ordered[position : position + need - len(results)]]
        position += len(window)
        lacking = [h.chunk_id for h in window if not h.doc_id or (vector is not None and h.dense_score is None)]
        held = keywords.held(lacking) if keywords is not None and lacking else {}
        window = [_completed(hit, held[hit.chunk_id], vector) if hit.chunk_id in held else hit for hit in window]
        missing = [h.chunk_id for h in window if not h.doc_id or (vector is not None and h.dense_score is None)]
        stored = {c.chunk_id: c for c in await store.get_chunks(ids=missing, with_embeddings=vector is not None)} if missing else {}
        for hit in window:
            if hit.chunk_id in missing:
                chunk = stored.get(hit.chunk_id)
                if chunk is None:
                    continue  # deleted since a leg saw it
                hit = _completed(hit, chunk, vector)
            if threshold is None or (hit.dense_score is not None and hit.dense_score >= threshold):
                results.append(hit)
    return results


def _completed(hit: SearchHit, chunk: StoredChunk, vector: list[float] | None) -> SearchHit:
    """`hit` with the content and, when a leg lacked it, the cosine similarity of `chunk` (which may come
    without its embedding: the keyword index keeps vectors only for exact search)."""
    if not hit.doc_id:
        hit = replace(hit, doc_id=chunk.doc_id, content=chunk.content, metadata=chunk.metadata)
    if hit.dense_score is None and vector is not None and len(chunk.embedding):
        hit = replace(hit, dense_score=_dot(vector, chunk.embedding))
    return hit


async def _rerank(results: list[SearchHit], *, query: str, reranker: Reranker, depth: int) -> list[SearchHit]:
    head, tail = results[:depth], results[depth:]
    # With contextual chunking, the chunk as it was indexed: its prefix says what the chunk is about.
    passages = [indexed_text(h.content, h.metadata) for h in head]
    try:
        scores = await reranker.score(query=query, passages=passages)
    except Exception:  # the model's own failure: the fused order still answers, as without a reranker
        log.exception("rerank failed; results keep the order of the search", extra={"passages": len(passages)})
        metrics.rerank_failed()
        return results
    rescored = [replace(hit, rerank_score=float(score)) for hit, score in zip(head, scores, strict=True)]
    rescored.sort(key=lambda h: h.rerank_score, reverse=True)  # type: ignore[arg-type, return-value]
    return rescored + tail
