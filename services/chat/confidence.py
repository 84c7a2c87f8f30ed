"""How much to trust an answer: High / Medium / Low from retrieval strength and citation support.

    score = 0.5 × retrieval + 0.5 × support

- retrieval: the rank-weighted relevance (cosine) of the passages the answer cites, rescaled so
  that WEAK_RELEVANCE (0.3) counts 0 and STRONG_RELEVANCE (0.6) or more counts 1. On raw cosines a
  strong and a useless passage differ by only ~0.3, too little to move a level.
- support: the share of supported citations from the grounding check, weak counting half.

High needs score ≥ HIGH_AT (0.8) and no unsupported citation; Medium needs score ≥ MEDIUM_AT (0.6).
So strong retrieval with every citation supported is High (1.0); strong retrieval with half the
citations unsupported is Medium at most (0.75); weak retrieval (~0.3) is Low however well supported
(0.5); an answer citing nothing is always Low.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.chat.grounding import Grounding

Level = Literal["High", "Medium", "Low"]

HIGH_AT = 0.8
MEDIUM_AT = 0.6
WEAK_RELEVANCE = 0.3
STRONG_RELEVANCE = 0.6
_RETRIEVAL_WEIGHT = 0.5
_WEAK_CREDIT = 0.5


@dataclass(frozen=True)
class Confidence:
    level: Level
    score: float
    reason: str


def rank_weighted(scores: list[float], *, depth: int = 3) -> float:
    """Mean of the top `depth` scores in rank order, weighted 1, 1/2, 1/3, ...; 0 when empty.

    Capped at 3: the answer rests on the best passages, and without a cap passages 4-8 (a third of
    the weight) would make a question with many relevant passages look weaker than one with two."""
    top = scores[:depth]
    if not top:
        return 0.0
    weights = [1 / (rank + 1) for rank in range(len(top))]
    return sum(w * s for w, s in zip(weights, top)) / sum(weights)


def retrieval_strength(relevances: list[float]) -> float:
    """rank_weighted relevance rescaled to 0 (≤ WEAK_RELEVANCE) .. 1 (≥ STRONG_RELEVANCE)."""
    span = (rank_weighted(relevances) - WEAK_RELEVANCE) / (STRONG_RELEVANCE - WEAK_RELEVANCE)
    return min(max(span, 0.0), 1.0)


def support_share(grounding: Grounding) -> float:
    """Supported citations count 1, weak ones 0.5, unsupported 0; 0 when nothing is cited."""
    cited = grounding.cited
    return (grounding.supported + _WEAK_CREDIT * grounding.weak) / cited if cited else 0.0


def assess(*, relevances: list[float], relevant_sources: int, grounding: Grounding) -> Confidence:
    """Confidence in an answer.

    `relevances`: cosine (0..1) of the passages the answer rests on, best first; `relevant_sources`:
    how many distinct documents those passages come from; `grounding`: the check of the answer's
    citations (services.chat.grounding)."""
    retrieval = retrieval_strength(relevances)
    support = support_share(grounding)
    score = round(_RETRIEVAL_WEIGHT * retrieval + (1 - _RETRIEVAL_WEIGHT) * support, 3)
    reason = _reason(relevant_sources, grounding, relevance=rank_weighted(relevances), strength=retrieval)
    if grounding.cited == 0:
        return Confidence("Low", score, reason)
    if score >= HIGH_AT and grounding.unsupported == 0:
        return Confidence("High", score, reason)
    return Confidence("Medium" if score >= MEDIUM_AT else "Low", score, reason)


def _reason(relevant_sources: int, grounding: Grounding, *, relevance: float, strength: float) -> str:
    cited = grounding.cited
    parts = [_count(relevant_sources, "relevant source"), _count(cited, "citation") if cited else "no citation"]
    if cited:
        parts.append("all supported" if grounding.supported == cited else f"{grounding.supported} of {cited} supported")
    if grounding.unsupported:
        parts.append(f"{grounding.unsupported} unsupported")
    reason = ", ".join(parts)
    if strength < 1:
        reason += f"; the passages match the question {'weakly' if strength < 0.5 else 'moderately'} ({relevance:.2f})"
    return reason


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def small_talk() -> Confidence:
    return Confidence("Low", 0.0, "small talk: no documents were searched")


def no_information(*, best_relevance: float | None, threshold: float) -> Confidence:
    if best_relevance is None:
        return Confidence("Low", 0.0, "retrieval found no passage")
    return Confidence("Low", 0.0, f"the best passage scored {best_relevance:.2f}, below the relevance threshold {threshold:.2f}")
