"""The closed-loop load driver: what it counts, how it stops, how it paces, and the figures it reports."""
from __future__ import annotations

import asyncio
import math

import pytest

from bench.load import LoadResult, median_of, ratio, run_load

pytestmark = pytest.mark.unit


async def test_every_request_is_counted_once_as_a_success_or_an_error() -> None:
    seen: list[int] = []

    async def call(number: int) -> None:
        seen.append(number)
        await asyncio.sleep(0.001)
        if number % 5 == 0:
            raise RuntimeError(f"/api/chat answered 503 for {number}")

    result = await run_load(call, clients=4, duration_s=0.2)
    assert sorted(seen) == list(range(len(seen)))  # numbers handed out once each, none skipped
    assert result.requests == len(seen) == len(result.latencies_ms) + result.errors
    assert result.errors == sum(1 for n in seen if n % 5 == 0)
    assert 0 < len(result.error_samples) <= 5 and "answered 503" in result.error_samples[0]
    assert result.rate == pytest.approx(len(result.latencies_ms) / result.seconds)


async def test_max_requests_bounds_the_count_and_the_interval_paces_each_client() -> None:
    unpaced = await run_load(lambda n: asyncio.sleep(0), clients=3, duration_s=5, max_requests=7)
    assert unpaced.requests == 7 and unpaced.seconds < 1

    paced = await run_load(lambda n: asyncio.sleep(0), clients=2, duration_s=0.35, interval_s=0.1)
    assert 6 <= paced.requests <= 10  # 2 clients x one start per 0.1 s over 0.35 s: 8, give or take a tick


async def test_a_slow_request_delays_its_client_not_the_others() -> None:
    async def call(number: int) -> None:
        await asyncio.sleep(0.15 if number == 0 else 0.01)

    result = await run_load(call, clients=2, duration_s=0.1)
    assert max(result.latencies_ms) >= 150
    assert len(result.latencies_ms) >= 5  # the other client kept going meanwhile


def test_percentiles_ratios_and_medians() -> None:
    result = LoadResult(clients=1, seconds=2.0, latencies_ms=[float(x) for x in range(1, 101)], errors=1)
    assert (result.latency(50), result.latency(95), result.latency(99)) == (51.0, 95.0, 99.0)
    assert result.rate == 50.0 and result.requests == 101
    assert result.as_dict()["p99"] == 99.0 and result.as_dict()["errors"] == 1
    assert math.isnan(LoadResult(clients=1, seconds=1.0).latency(50))
    assert ratio(80.0, 100.0) == 0.8 and math.isnan(ratio(1.0, 0.0))
    runs = [LoadResult(clients=1, seconds=1.0, latencies_ms=[1.0] * n) for n in (10, 30, 20)]
    assert median_of(runs, lambda r: r.rate) == 20.0


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        await run_load(lambda n: asyncio.sleep(0), clients=0, duration_s=1)
    with pytest.raises(ValueError):
        await run_load(lambda n: asyncio.sleep(0), clients=1, duration_s=0)
