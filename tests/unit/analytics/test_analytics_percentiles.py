from __future__ import annotations

import numpy
import pytest

from services.analytics.reports.percentiles import mean, percentiles, ratio

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("values", "p50", "p95", "p99"),
    [
        ([42.0], 42.0, 42.0, 42.0),
        ([10.0, 30.0], 20.0, 29.0, 29.8),  # 10 + q * 20
        ([7.0, 7.0, 7.0], 7.0, 7.0, 7.0),
        ([5.0, 5.0, 5.0, 10.0], 5.0, 9.25, 9.85),  # ranks 2.85 and 2.97 fall between the last 5 and the 10
        ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, 4.8, 4.96),
    ],
)
def test_linear_interpolation_between_closest_ranks(values: list[float], p50: float, p95: float, p99: float) -> None:
    figures = percentiles(values)
    assert (figures.p50, figures.p95, figures.p99) == (pytest.approx(p50), pytest.approx(p95), pytest.approx(p99))
    assert [figures.p50, figures.p95, figures.p99] == list(numpy.percentile(values, [50, 95, 99]))


def test_no_values_give_nulls() -> None:
    figures = percentiles([])
    assert (figures.p50, figures.p95, figures.p99, mean([])) == (None, None, None, None)


def test_random_data_matches_numpy_in_any_order() -> None:
    values = numpy.random.default_rng(6).lognormal(5, 1, 1001).round(1).tolist()
    expected = list(numpy.percentile(sorted(values), [50, 95, 99]))
    figures = percentiles(values)
    assert [figures.p50, figures.p95, figures.p99] == expected


def test_mean_and_ratio() -> None:
    assert mean([1.0, 2.0, 6.0]) == 3.0
    assert (ratio(1, 4), ratio(0, 0), ratio(3, 0)) == (0.25, None, None)
