"""The best rows of a score vector, in an order that does not depend on how many are asked for."""
from __future__ import annotations

import numpy as np


def best_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` highest of the 1-D `scores`, highest first, equal scores in row order.

    Duplicate chunks (a disclaimer repeated in many documents) score exactly alike. argpartition alone
    picks and orders such ties differently for each k, so a search for 5 results and one for 10 could
    disagree on the first 5; here every tie at the cut is considered and the lower rows win."""
    if k < len(scores):
        kth_highest = np.partition(scores, len(scores) - k)[len(scores) - k]
        rows = np.flatnonzero(scores >= kth_highest)
    else:
        rows = np.arange(len(scores))
    return rows[np.argsort(-scores[rows], kind="stable")[:k]]
