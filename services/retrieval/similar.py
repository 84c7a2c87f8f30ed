"""Documents like a given one: the mean of its chunk embeddings as the query, documents ranked by
their best chunk, the document itself left out. Filters, as in search, choose the chunks that may answer:
they go into the store's query, so the top_k are the nearest of the matching documents, however far."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shared.filters import Condition, Filter, parse_filter
from services.retrieval.ports import MetadataValue, VectorStore

_MAX_CHUNKS = 1000


@dataclass(frozen=True)
class SimilarDocument:
    doc_id: str
    score: float  # cosine similarity of its best chunk to the document's mean embedding
    chunk_id: str  # that best chunk
    metadata: dict[str, MetadataValue]


def _mean_direction(vectors: list[Sequence[float]]) -> list[float]:
    total = np.sum(np.asarray(vectors, dtype=np.float64), axis=0)
    norm = float(np.linalg.norm(total))
    return (total / norm if norm else total).tolist()


async def similar_documents(
    *, doc_id: str, top_k: int, store: VectorStore, filters: Filter | Mapping[str, Any] | None = None
) -> list[SimilarDocument] | None:
    """Up to top_k other documents whose chunks `filters` lets through, most similar first; None when `doc_id`
    is not stored. The filters choose the results only: the whole of `doc_id` makes the query."""
    if top_k < 1:
        raise ValueError("top_k must be >= 1")
    wanted = parse_filter(filters)  # raises InvalidFilter before any store call
    own = await store.get_chunks(doc_ids=[doc_id], with_embeddings=True)
    if not own:
        return None
    query = _mean_direction([chunk.embedding for chunk in own])
    others = Filter(wanted.conditions + (Condition("doc_id", "$ne", doc_id),))
    asked = top_k * 4
    while True:
        hits = await store.query(embedding=query, top_k=asked, where=others)
        best: dict[str, SimilarDocument] = {}
        for hit in hits:  # nearest first, so the first chunk seen of a document is its best
            if hit.doc_id not in best:
                score = max(-1.0, min(1.0, 1.0 - hit.distance))
                best[hit.doc_id] = SimilarDocument(hit.doc_id, score, hit.chunk_id, hit.metadata)
        if len(best) >= top_k or len(hits) < asked or asked >= _MAX_CHUNKS:
            return list(best.values())[:top_k]
        asked = min(asked * 4, _MAX_CHUNKS)
