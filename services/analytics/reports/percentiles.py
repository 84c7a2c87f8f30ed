"""Latency figures from a list of values: linear interpolation between closest ranks, numpy's default
method (the same as PostgreSQL's percentile_cont)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy

from services.analytics.models import Percentiles

QUANTILES = (50, 95, 99)


def percentiles(values: Sequence[float]) -> Percentiles:
    """p50, p95 and p99 of `values`; all null when there is none."""
    if not values:
        return Percentiles()
    p50, p95, p99 = numpy.percentile(numpy.asarray(values, dtype=float), QUANTILES)
    return Percentiles(p50=float(p50), p95=float(p95), p99=float(p99))


def mean(values: Sequence[float]) -> float | None:
    return float(numpy.mean(numpy.asarray(values, dtype=float))) if values else None


def ratio(part: float, whole: float) -> float | None:
    """part / whole, null when whole is zero."""
    return part / whole if whole else None
