"""Dense search: embed the query, ask the store for its nearest chunks, score by cosine similarity."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.retrieval.ports import Embedder, MetadataValue, VectorStore

Mode = Literal["dense"]


@dataclass(frozen=True)
class SearchHit:
    chunk_id: str
    doc_id: str
    content: str
    score: float
    dense_score: float | None
    keyword_score: float | None
    metadata: dict[str, MetadataValue]


async def search(
    *,
    query: str,
    top_k: int,
    embedder: Embedder,
    store: VectorStore,
    threshold: float | None = None,
    mode: Mode = "dense",
    filters: dict[str, MetadataValue] | None = None,
) -> list[SearchHit]:
    """Up to top_k chunks, best first; those scoring below `threshold` are left out."""
    if top_k < 1:
        raise ValueError("top_k must be >= 1")
    if mode != "dense":
        raise ValueError(f"unsupported search mode: {mode}")
    vector = await embedder.embed_query(query)
    hits = await store.query(embedding=vector, top_k=top_k, where=filters or None)
    results = []
    for hit in hits:
        # Cosine space: distance = 1 - cosine similarity.
        score = max(-1.0, min(1.0, 1.0 - hit.distance))
        if threshold is not None and score < threshold:
            continue
        results.append(
            SearchHit(
                chunk_id=hit.chunk_id,
                doc_id=hit.doc_id,
                content=hit.content,
                score=score,
                dense_score=score,
                keyword_score=None,
                metadata=hit.metadata,
            )
        )
    results.sort(key=lambda r: r.score, reverse=True)
    return results
