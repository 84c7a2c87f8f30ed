from __future__ import annotations

import pytest

from services.retrieval.fusion import reciprocal_rank_fusion

pytestmark = pytest.mark.unit


def test_scores_are_weighted_sums_of_reciprocal_ranks() -> None:
    fused = dict(reciprocal_rank_fusion({"dense": ["a", "b", "c"], "keyword": ["c", "a"]}, k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)


def test_best_first_and_agreement_beats_one_top_rank() -> None:
    fused = reciprocal_rank_fusion({"dense": ["x", "a", "b"], "keyword": ["y", "b", "a"]}, k=60)
    assert [item for item, _ in fused] == ["a", "b", "x", "y"]


def test_ties_keep_the_order_of_first_appearance() -> None:
    fused = reciprocal_rank_fusion({"dense": ["d1", "d2"], "keyword": ["k1", "k2"]}, k=60)
    assert [item for item, _ in fused] == ["d1", "k1", "d2", "k2"]


def test_weights_and_k() -> None:
    fused = dict(reciprocal_rank_fusion({"dense": ["a"], "keyword": ["b"]}, k=0, weights={"dense": 2.0, "keyword": 0.5}))
    assert fused == {"a": 2.0, "b": 0.5}
    muted = reciprocal_rank_fusion({"dense": ["a", "b"], "keyword": ["b"]}, k=10, weights={"keyword": 0.0})
    assert [item for item, _ in muted] == ["a", "b"]
    assert reciprocal_rank_fusion({"dense": [], "keyword": []}) == []
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"dense": ["a"]}, k=-1)
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"dense": ["a"]}, weights={"dense": -1})
