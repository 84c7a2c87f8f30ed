"""From ranked chunks to ranked documents: a document scores as its best chunk."""
from __future__ import annotations

from collections.abc import Iterable

from services.retrieval.search import SearchHit


def best_chunk_per_document(hits: Iterable[SearchHit], *, limit: int = 100) -> dict[str, float]:
    """{doc_id: score of its best chunk} for the `limit` best documents, best first.

    Documents whose best chunks tie keep the order the search returned them in.
    """
    if limit < 1:
        raise ValueError("limit must be >= 1")
    best: dict[str, float] = {}
    for hit in hits:
        if hit.doc_id not in best or hit.score > best[hit.doc_id]:
            best[hit.doc_id] = hit.score
    ranked = sorted(best.items(), key=lambda item: item[1], reverse=True)  # stable: ties keep search order
    return dict(ranked[:limit])


def rank_scores(ranked: dict[str, float]) -> dict[str, float]:
    """Scores that encode the order of `ranked` without ties.

    trec_eval re-sorts a run by score and breaks ties by document id, which would reorder tied
    documents; scoring by position makes it evaluate exactly the order Cairn returns.
    """
    return {doc_id: float(len(ranked) - position) for position, doc_id in enumerate(ranked)}
