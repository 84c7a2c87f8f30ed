"""Ingest a BEIR corpus and run its queries through the functions the service uses; score per mode.

The wiring (cairn/eval.py) binds `ingest` and `search` to services.retrieval.ingestion and
services.retrieval.search with the real embedder and store, so what is measured is what is served.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import numpy as np

from services.retrieval.evaluation.beir import BeirDataset
from services.retrieval.evaluation.corpus import as_new_document, truncate_to_tokens
from services.retrieval.evaluation.metrics import Scores, score
from services.retrieval.evaluation.ranking import best_chunk_per_document, rank_scores
from services.retrieval.ingestion import IngestResult, NewDocument
from services.retrieval.search import SearchHit

IngestFn = Callable[[NewDocument], Awaitable[IngestResult]]
SearchFn = Callable[[str, str, int], Awaitable[list[SearchHit]]]  # (query, mode, top_k) -> chunks, best first
Progress = Callable[[int], None]  # called with how many more items are done

DOCUMENTS_RANKED = 100  # per query: enough for Recall@100


@dataclass
class IngestReport:
    documents: int
    chunks: int
    seconds: float
    failures: list[tuple[str, str]] = field(default_factory=list)  # (doc_id, reason)


@dataclass
class ModeReport:
    mode: str
    scores: Scores
    chunks_requested: int
    latency_ms: dict[str, float]  # p50, p95 of one search call


async def ingest_corpus(
    dataset: BeirDataset,
    *,
    ingest: IngestFn,
    truncate_to: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    concurrency: int = 4,
    progress: Progress | None = None,
) -> IngestReport:
    """Every corpus document through `ingest`; with `truncate_to`, each is first cut to that many tokens
    (whole documents as single chunks, the way an embedding benchmark reads them)."""
    if truncate_to is not None and count_tokens is None:
        raise ValueError("truncate_to needs count_tokens")
    started = time.perf_counter()
    limit = asyncio.Semaphore(concurrency)  # keeps the store busy while the model encodes
    report = IngestReport(documents=0, chunks=0, seconds=0.0)

    async def one(document: NewDocument) -> None:
        async with limit:
            if truncate_to is not None:
                text = await asyncio.to_thread(truncate_to_tokens, document.text, max_tokens=truncate_to, count_tokens=count_tokens)
                document = replace(document, text=text)
            try:
                result = await ingest(document)
            except ValueError as exc:  # empty or unreadable text: counted, not fatal
                report.failures.append((document.doc_id or "", str(exc)))
            else:
                report.documents += 1
                report.chunks += result.chunks
            if progress:
                progress(1)

    await asyncio.gather(*(one(as_new_document(doc, dataset=dataset.name)) for doc in dataset.corpus.values()))
    report.seconds = time.perf_counter() - started
    return report


def chunks_to_request(*, chunks: int, documents: int, ranked: int = DOCUMENTS_RANKED) -> int:
    """Enough chunks that, ranked by best chunk, about `ranked` distinct documents remain."""
    per_document = math.ceil(chunks / max(documents, 1))
    return max(1, min(chunks, ranked * per_document))


async def run_mode(
    dataset: BeirDataset, *, mode: str, search: SearchFn, top_k: int, progress: Progress | None = None
) -> ModeReport:
    """The split's queries one at a time (so latencies are not inflated by each other), scored."""
    run: dict[str, dict[str, float]] = {}
    latencies = []
    for query_id, query in dataset.queries.items():
        started = time.perf_counter()
        hits = await search(query, mode, top_k)
        latencies.append((time.perf_counter() - started) * 1000)
        # BEIR's evaluation (ignore_identical_ids, which its published figures and MTEB's use) drops a document
        # whose id is the query's: in ArguAna and Quora the query itself is in the corpus.
        others = (hit for hit in hits if hit.doc_id != query_id)
        run[query_id] = rank_scores(best_chunk_per_document(others, limit=DOCUMENTS_RANKED))
        if progress:
            progress(1)
    return ModeReport(
        mode=mode,
        scores=score(dataset.qrels, run),
        chunks_requested=top_k,
        latency_ms=percentiles(latencies),
    )


def percentiles(values_ms: list[float]) -> dict[str, float]:
    if not values_ms:
        return {"p50": math.nan, "p95": math.nan}
    p50, p95 = np.percentile(np.asarray(values_ms), [50, 95])
    return {"p50": float(p50), "p95": float(p95)}
