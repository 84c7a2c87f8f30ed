"""The end-to-end section's arguments, repeat order, figures and table, from made-up load results."""
from __future__ import annotations

import argparse

import pytest

from bench.e2e import (
    CHAT_HAYSTACK_RATIO, P50_EXCESS_MS, SEARCH_FLOOR_RATIO, SYSTEMS, build_parser, figures_from, markdown_table,
    options_from, order_for, parse_levels,
)
from bench.load import LoadResult

pytestmark = pytest.mark.unit


def _result(rate: float, p50: float, *, errors: int = 0, clients: int = 1) -> LoadResult:
    # 10 s at `rate` req/s, every latency p50 (so every percentile is p50)
    return LoadResult(clients=clients, seconds=10.0, latencies_ms=[p50] * int(rate * 10), errors=errors)


def test_arguments() -> None:
    options = options_from(build_parser().parse_args(["--duration", "5", "--repeats", "1", "--levels", "32,1"]))
    assert (options.duration_s, options.repeats, options.levels) == (5.0, 1, (1, 32))
    defaults = options_from(build_parser().parse_args([]))
    assert (defaults.duration_s, defaults.repeats, defaults.levels) == (10.0, 3, (1, 8, 32))
    assert parse_levels("8, 1,8") == (1, 8)
    for bad in ("", "0", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_levels(bad)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--duration", "0"])


def test_repeats_alternate_the_order_of_the_systems() -> None:
    assert order_for(0) == SYSTEMS == order_for(2)
    assert order_for(1) == tuple(reversed(SYSTEMS))


def _results() -> dict:
    results = {}
    for clients in (1, 32):
        # two repeats; Cairn search at 0.9 and 0.7 of the floor, chat 12x and 20x Haystack
        results[("cairn", "search", clients)] = [_result(90, 20), _result(70, 24, errors=1 if clients == 32 else 0)]
        results[("floor", "search", clients)] = [_result(100, 14), _result(100, 15)]
        results[("haystack", "search", clients)] = [_result(5, 200), _result(5, 210)]
        results[("cairn", "chat", clients)] = [_result(60, 30), _result(100, 32)]
        results[("floor", "chat", clients)] = [_result(80, 16), _result(80, 17)]
        results[("haystack", "chat", clients)] = [_result(5, 250), _result(5, 260)]
    return results


def test_figures_are_medians_of_same_repeat_ratios_with_targets_where_the_issue_sets_them() -> None:
    figures = {f.name: f for f in figures_from(_results(), (1, 32))}
    search = figures["e2e /api/search req/s, 32 clients, Cairn / floor"]
    assert search.compared == pytest.approx([0.9, 0.7]) and search.result == pytest.approx(0.8)
    assert search.target == SEARCH_FLOOR_RATIO and search.passed is True
    chat = figures["e2e /api/chat req/s, 32 clients, Cairn / Haystack"]
    assert chat.result == pytest.approx(16.0) and chat.target == CHAT_HAYSTACK_RATIO and chat.passed is True
    assert figures["e2e /api/search req/s, 1 clients, Cairn / floor"].target is None
    assert figures["e2e /api/chat req/s, 32 clients, Cairn / floor"].target is None
    excess = figures["e2e /api/search p50, 1 client, Cairn - floor"]
    assert excess.compared == pytest.approx([6.0, 9.0]) and excess.target == P50_EXCESS_MS and excess.passed is True
    assert figures["e2e /api/chat p50, 1 client, Cairn - floor"].result == pytest.approx(14.5)
    assert figures["e2e /api/chat p50, 1 client, Cairn - floor"].passed is False
    errors = figures["e2e /api/search errors, 32 clients, Cairn"]
    assert errors.values == [0.0, 1.0] and errors.passed is False  # the median is 0.5 errors: a miss
    assert figures["e2e /api/chat errors, 32 clients, Cairn"].passed is True


def test_a_level_without_results_gives_no_figures() -> None:
    names = [f.name for f in figures_from(_results(), (1, 8, 32))]
    assert not [n for n in names if " 8 clients" in n]


def test_markdown_table_has_a_row_per_endpoint_and_client_count() -> None:
    table = markdown_table(_results(), (1, 32)).splitlines()
    assert len(table) == 2 + 4
    assert table[0].startswith("| endpoint | clients | Cairn req/s")
    row = next(line for line in table if line.startswith("| /api/search | 32 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:5] == ["80.0", "22 / 22 / 22", "1"]  # medians of rates and latencies, errors summed
    assert cells[-2:] == ["0.80x", "16.00x"]
