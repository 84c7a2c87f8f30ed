"""How much to trust an answer: High / Medium / Low from retrieval strength and citation support."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["High", "Medium", "Low"]

HIGH_AT = 0.6
MEDIUM_AT = 0.4
_RETRIEVAL_WEIGHT = 0.75
_CITATIONS_FOR_FULL_SUPPORT = 2


@dataclass(frozen=True)
class Confidence:
    level: Level
    score: float
    reason: str


def rank_weighted(scores: list[float], *, depth: int = 3) -> float:
    """Mean of the top `depth` scores in rank order, weighted 1, 1/2, 1/3, ...; 0 when empty."""
    top = scores[:depth]
    if not top:
        return 0.0
    weights = [1 / (rank + 1) for rank in range(len(top))]
    return sum(w * s for w, s in zip(weights, top)) / sum(weights)


def assess(*, relevances: list[float], citation_count: int) -> Confidence:
    """`relevances`: the retrieval scores (cosine, 0..1) of the passages given to the model, best first."""
    retrieval = min(max(rank_weighted(relevances), 0.0), 1.0)
    support = min(citation_count, _CITATIONS_FOR_FULL_SUPPORT) / _CITATIONS_FOR_FULL_SUPPORT
    score = round(_RETRIEVAL_WEIGHT * retrieval + (1 - _RETRIEVAL_WEIGHT) * support, 3)
    cited = f"{citation_count} citation{'s' if citation_count != 1 else ''}"
    if citation_count == 0:
        return Confidence("Low", score, f"no passage is cited (retrieval strength {retrieval:.2f})")
    if score >= HIGH_AT:
        return Confidence("High", score, f"{cited} backed by strongly matching passages (retrieval {retrieval:.2f})")
    if score >= MEDIUM_AT:
        return Confidence("Medium", score, f"{cited}; the passages match the question moderately (retrieval {retrieval:.2f})")
    return Confidence("Low", score, f"{cited}; the passages match the question weakly (retrieval {retrieval:.2f})")


def no_information(*, best_relevance: float | None, threshold: float) -> Confidence:
    best = "no passage was found" if best_relevance is None else f"the best passage scored {best_relevance:.2f}"
    return Confidence("Low", 0.0, f"{best}, below the relevance threshold {threshold:.2f}")
