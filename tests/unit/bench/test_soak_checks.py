"""The soak's arguments and its memory-growth measure."""
from __future__ import annotations

import pytest

from bench.soak import memory_growth, parse_args

pytestmark = pytest.mark.unit


def test_arguments_and_their_limits() -> None:
    args = parse_args([])
    assert (args.minutes, args.warmup_minutes, args.clients, args.rate, args.sample_s, args.max_growth) == (10, 2, 4, 6, 10, 0.1)
    assert parse_args(["--minutes", "1", "--warmup-minutes", "0.5", "--sample-s", "5"]).minutes == 1
    for bad in (["--minutes", "2", "--warmup-minutes", "2"], ["--clients", "0"], ["--rate", "0"],
                ["--minutes", "1", "--warmup-minutes", "0.9"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_growth_compares_medians_after_the_warm_up_and_ignores_the_warm_up() -> None:
    samples = [(float(t), {"chat": mb, "gateway": 80.0}) for t, mb in
               [(0, 50), (10, 90), (20, 100), (30, 104), (40, 98), (50, 100), (60, 109), (70, 112), (80, 110)]]
    growth = {g.service: g for g in memory_growth(samples, warmup_s=20)}
    assert growth["chat"].after_warmup_mb == 100 and growth["chat"].end_mb == 110  # medians of 100,104,98 / 109,112,110
    assert growth["chat"].growth == pytest.approx(0.10) and growth["chat"].peak_mb == 112
    assert growth["gateway"].growth == 0


def test_too_few_samples_after_the_warm_up_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError):
        memory_growth([(0.0, {"chat": 1.0}), (30.0, {"chat": 1.0})], warmup_s=20)
