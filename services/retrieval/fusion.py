"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009): a weighted sum of 1 / (k + rank)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[str]], *, k: float = 60.0, weights: Mapping[str, float] | None = None
) -> list[tuple[str, float]]:
    """Fuse ranked id lists (best first, ranks from 1) into (id, score) pairs, best first.

    `rankings` maps a leg's name to its ids; `weights` maps a leg's name to its weight (default 1).
    An id absent from a leg gets nothing from it. Equal scores keep the order of first appearance,
    legs taken in the order given.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    weights = weights or {}
    scores: dict[str, float] = {}
    for leg, ids in rankings.items():
        weight = weights.get(leg, 1.0)
        if weight < 0:
            raise ValueError(f"weight of {leg!r} must be >= 0")
        for rank, item in enumerate(ids, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
