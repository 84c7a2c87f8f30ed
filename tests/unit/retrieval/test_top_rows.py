"""Equal scores (duplicate chunks) rank the same whatever the number of results asked for."""
from __future__ import annotations

import numpy as np
import pytest

from services.retrieval.adapters.top_rows import best_rows

pytestmark = pytest.mark.unit


def test_the_k_highest_come_first_and_equal_scores_in_row_order() -> None:
    scores = np.asarray([0.2, 0.9, 0.5, 0.9, 0.5, 0.1, 0.5], dtype=np.float32)
    assert best_rows(scores, 4).tolist() == [1, 3, 2, 4]
    assert best_rows(scores, 100).tolist() == [1, 3, 2, 4, 6, 0, 5]


def test_every_k_agrees_on_the_common_head() -> None:
    rng = np.random.default_rng(7)
    scores = rng.integers(0, 20, size=5_000).astype(np.float32)  # hundreds of ties at every value
    longest = best_rows(scores, 1_000).tolist()
    for k in (1, 5, 10, 37, 100, 999):
        assert best_rows(scores, k).tolist() == longest[:k]
    assert longest == sorted(longest, key=lambda row: (-scores[row], row))
