"""Retrieval's metrics: search stage latencies, embedding cache lookups, micro-batch sizes, rerank failures,
and the tokens and failures of the contextual-chunking model."""
from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from prometheus_client import Counter, Histogram

from shared.metrics import BATCH_SIZE_BUCKETS, STAGE_BUCKETS, timed

T = TypeVar("T")

STAGES = ("encode", "dense", "keyword", "fusion", "fetch", "rerank")

STAGE_SECONDS = Histogram(
    "cairn_retrieval_stage_seconds",
    "Duration of one search stage: encode (query embedding, cache included), dense (nearest neighbours), "
    "keyword (BM25), fusion (reciprocal rank fusion), fetch (completing hits), rerank (cross-encoder)",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
CACHE_LOOKUPS = Counter(
    "cairn_retrieval_embedding_cache_lookups_total",
    "Embedding cache lookups: cache=query (in-memory LRU) or document (SQLite), result=hit or miss",
    ["cache", "result"],
)
BATCH_SIZE = Histogram(
    "cairn_retrieval_batch_size",
    "Distinct items per micro-batch, by batcher (query_encode, document_encode, exact_scan, and the Chroma store's)",
    ["batcher"],
    buckets=BATCH_SIZE_BUCKETS,
)

CONTEXT_LLM_TOKENS = Counter(
    "cairn_retrieval_llm_tokens_total",
    "Tokens the contextual-chunking model reported, by model and kind (prompt, completion)",
    ["model", "kind"],
)
CONTEXT_LLM_FAILURES = Counter(
    "cairn_retrieval_llm_failures_total",
    "Calls to the contextual-chunking model that failed after the SDK's retries, by reason (HTTP status or error)",
    ["reason"],
)
RERANK_FAILURES = Counter(
    "cairn_retrieval_rerank_failures_total",
    "Searches whose cross-encoder rerank raised; they were answered in the order of the search",
)

for _stage in STAGES:  # every stage's series exists from the start, so rate() has a zero to start from
    STAGE_SECONDS.labels(_stage)
for _cache in ("query", "document"):
    for _result in ("hit", "miss"):
        CACHE_LOOKUPS.labels(_cache, _result)


async def timed_stage(stage: str, awaitable: Awaitable[T]) -> T:
    return await timed(STAGE_SECONDS.labels(stage), awaitable)


def stage_timer(stage: str):  # noqa: ANN201 - prometheus_client's Timer, a context manager
    return STAGE_SECONDS.labels(stage).time()


def cache_lookups(cache: str, *, hits: int = 0, misses: int = 0) -> None:
    if hits:
        CACHE_LOOKUPS.labels(cache, "hit").inc(hits)
    if misses:
        CACHE_LOOKUPS.labels(cache, "miss").inc(misses)


def batch_ran(batcher: str, size: int) -> None:
    BATCH_SIZE.labels(batcher).observe(size)


def context_llm_used(model: str, *, prompt_tokens: int, completion_tokens: int) -> None:
    CONTEXT_LLM_TOKENS.labels(model, "prompt").inc(prompt_tokens)
    CONTEXT_LLM_TOKENS.labels(model, "completion").inc(completion_tokens)


def rerank_failed() -> None:
    RERANK_FAILURES.inc()


def context_llm_failed(reason: str) -> None:
    CONTEXT_LLM_FAILURES.labels(reason).inc()
