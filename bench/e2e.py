"""End to end: Cairn through its gateway against the same work in one process, and against a Haystack
pipeline, all in one run on the SciFact bench index with the same offline generator.

(a) cairn: gateway -> chat -> retrieval, chat answering with its built-in offline generator (its default
    with no LLM_BASE_URL, the generator the floor calls, reached in-process through the OpenAI SDK),
    analytics consuming the events, as real processes (bench.cairn_system); aiohttp clients call
    /api/search (top 10) and /api/chat as a logged-in user.
(b) floor: bench.floor in this process: micro-batched query encode, exact dense top-100, BM25
    top-100, reciprocal rank fusion; for chat the same and the offline generator's answer function.
(c) haystack: bench.haystack_pipeline in this process, driven from a pool of as many threads as
    clients, generating through the offline generator over HTTP.

For each endpoint and number of concurrent clients (1, 8, 32), each system runs closed-loop for a fixed
time, back to back, the order of the systems reversed every other repeat; the queries are the SciFact
test queries, cycling, the same ones for the three systems of a cell. Figures are per-repeat ratios of
the same cell (this machine's speed drifts), reported as the median over repeats.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.common import Figure, format_table, load_average, scifact_dir
from bench.load import Call, LoadResult, median_of, ratio, run_load
from shared.server import freeze_what_is_loaded

SYSTEMS = ("cairn", "floor", "haystack")
SYSTEM_NAMES = {"cairn": "Cairn", "floor": "floor", "haystack": "Haystack"}
ENDPOINTS = ("search", "chat")
LEVELS = (1, 8, 32)
SEARCH_TOP_K = 10
CHAT_TOP_K = 8  # chat's DEFAULT_TOP_K: the passages an answer is written from
CANDIDATES = 100  # per leg before fusion, in all three systems
TARGET_CLIENTS = 32
SEARCH_FLOOR_RATIO = 0.8  # /api/search req/s at 32 clients, at least this share of the floor's
CHAT_HAYSTACK_RATIO = 10.0  # /api/chat req/s at 32 clients, at least this many times Haystack's
P50_EXCESS_MS = 10.0  # at one client, p50 through the gateway at most this above the floor's
LLM_MODEL = "cairn-extractive"

Cell = tuple[str, str, int]  # system, endpoint, clients
Results = dict[Cell, list[LoadResult]]  # one result per repeat
Log = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    duration_s: float = 10.0
    repeats: int = 3
    levels: tuple[int, ...] = LEVELS
    warmup_requests: int = 12


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--levels takes comma-separated client counts, not {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("--levels needs at least one client count, each >= 1")
    return levels


def _positive(kind: type) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=_positive(float), default=Options.duration_s,
                        help=f"seconds per system, endpoint and client count (default {Options.duration_s:g})")
    parser.add_argument("--repeats", type=_positive(int), default=Options.repeats, help="repeats; the median is reported (default 3)")
    parser.add_argument("--levels", type=parse_levels, default=LEVELS, help="concurrent clients, comma-separated (default 1,8,32)")
    parser.add_argument("--scifact", help="BEIR SciFact folder (default: $CAIRN_EVALSETS/scifact or ../shared/evalsets/scifact)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a figure misses its target")
    return parser


def options_from(args: argparse.Namespace) -> Options:
    return Options(duration_s=args.duration, repeats=args.repeats, levels=tuple(args.levels))


def order_for(repeat: int) -> tuple[str, ...]:
    return SYSTEMS if repeat % 2 == 0 else tuple(reversed(SYSTEMS))


# -- figures and tables (pure) ---------------------------------------------------------------------------


def figures_from(results: Results, levels: Sequence[int]) -> list[Figure]:
    """Ratios of req/s per endpoint and client count (Cairn / floor, Cairn / Haystack), the one-client p50
    excess over the floor, and Cairn's errors at the target client count; each per repeat, then median."""
    figures: list[Figure] = []
    for endpoint in ENDPOINTS:
        path = f"/api/{endpoint}"
        for clients in levels:
            cairn = results.get(("cairn", endpoint, clients), [])
            for peer, target in (("floor", SEARCH_FLOOR_RATIO if endpoint == "search" else None),
                                 ("haystack", CHAT_HAYSTACK_RATIO if endpoint == "chat" else None)):
                baseline = results.get((peer, endpoint, clients), [])
                if not cairn or not baseline:
                    continue
                figure = Figure(
                    name=f"e2e {path} req/s, {clients} clients, Cairn / {SYSTEM_NAMES[peer]}", unit="req/s", kind="ratio",
                    target=target if clients == TARGET_CLIENTS else None, baseline_name=SYSTEM_NAMES[peer],
                )
                for ours, theirs in zip(cairn, baseline):
                    figure.add(ours.rate, theirs.rate)
                figures.append(figure)
        floor_one = results.get(("floor", endpoint, 1), [])
        cairn_one = results.get(("cairn", endpoint, 1), [])
        if floor_one and cairn_one:
            excess = Figure(name=f"e2e {path} p50, 1 client, Cairn - floor", unit="ms", kind="excess",
                            target=P50_EXCESS_MS, baseline_name="floor p50")
            for ours, theirs in zip(cairn_one, floor_one):
                excess.add(ours.latency(50), theirs.latency(50))
            figures.append(excess)
        if cairn_at_target := results.get(("cairn", endpoint, TARGET_CLIENTS), []):
            errors = Figure(name=f"e2e {path} errors, {TARGET_CLIENTS} clients, Cairn", unit="errors", kind="excess",
                            target=0.0, baseline_name="none")
            for result in cairn_at_target:
                errors.add(float(result.errors), 0.0)
            figures.append(errors)
    return figures


def _latencies(results: list[LoadResult]) -> str:
    return " / ".join(f"{median_of(results, lambda r, q=q: r.latency(q)):.0f}" for q in (50, 95, 99))


def _ratio_cell(ours: list[LoadResult], theirs: list[LoadResult]) -> str:
    ratios = [ratio(a.rate, b.rate) for a, b in zip(ours, theirs)]
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def markdown_table(results: Results, levels: Sequence[int]) -> str:
    """One row per endpoint and client count: each system's req/s, p50 / p95 / p99 and errors (medians
    over repeats; errors summed), then the median per-repeat ratios."""
    header = ["endpoint", "clients"]
    for system in SYSTEMS:
        name = SYSTEM_NAMES[system]
        header += [f"{name} req/s", f"{name} p50 / p95 / p99 ms", f"{name} errors"]
    header += ["Cairn / floor", "Cairn / Haystack"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for endpoint in ENDPOINTS:
        for clients in levels:
            cells = {system: results.get((system, endpoint, clients), []) for system in SYSTEMS}
            if not any(cells.values()):
                continue
            row = [f"/api/{endpoint}", str(clients)]
            for system in SYSTEMS:
                runs = cells[system]
                if runs:
                    row += [f"{median_of(runs, lambda r: r.rate):.1f}", _latencies(runs), str(sum(r.errors for r in runs))]
                else:
                    row += ["-", "-", "-"]
            row += [_ratio_cell(cells["cairn"], cells["floor"]), _ratio_cell(cells["cairn"], cells["haystack"])]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# -- the systems under load -----------------------------------------------------------------------------


class Systems:
    """How each system does one request of each kind, for the load driver."""

    def __init__(self, *, cairn_url: str, headers: dict[str, str], floor, haystack, threads: int) -> None:
        self.cairn_url = cairn_url
        self.headers = headers
        self.floor = floor
        self.haystack = haystack
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="haystack")

    async def measure(self, system: str, endpoint: str, *, clients: int, queries: list[str], offset: int,
                      duration_s: float, max_requests: int | None = None) -> LoadResult:
        def query(number: int) -> str:
            return queries[(offset + number) % len(queries)]

        if system != "cairn":
            return await run_load(self._in_process(system, endpoint, query), clients=clients, duration_s=duration_s,
                                  max_requests=max_requests)
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(
            base_url=self.cairn_url, headers=self.headers, connector=connector, timeout=aiohttp.ClientTimeout(total=120)
        ) as session:
            path = f"/api/{endpoint}"
            body = (lambda q: {"query": q, "top_k": SEARCH_TOP_K}) if endpoint == "search" else (lambda q: {"query": q})

            async def call(number: int) -> None:
                async with session.post(path, json=body(query(number))) as response:
                    text = await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{path} answered {response.status}: {text[:200]!r}")

            return await run_load(call, clients=clients, duration_s=duration_s, max_requests=max_requests)

    def _in_process(self, system: str, endpoint: str, query: Callable[[int], str]) -> Call:
        if system == "floor":
            if endpoint == "search":
                return lambda n: self.floor.search(query(n), top_k=SEARCH_TOP_K)
            return lambda n: self.floor.chat(query(n), top_k=CHAT_TOP_K)
        run = self.haystack.search if endpoint == "search" else self.haystack.chat
        loop = asyncio.get_running_loop()
        return lambda n: loop.run_in_executor(self.pool, run, query(n))

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def scifact_queries(dataset_dir: Path) -> list[str]:
    """The SciFact test queries, in file order."""
    from services.retrieval.evaluation.beir import load_beir

    return list(load_beir(dataset_dir, split="test").queries.values())


async def _measure_all(systems: Systems, queries: list[str], options: Options, log: Log) -> Results:
    for system in SYSTEMS:  # first requests load code, build the BM25 matrices, open connections
        for endpoint in ENDPOINTS:
            warm = await systems.measure(system, endpoint, clients=4, queries=queries, offset=0, duration_s=120,
                                         max_requests=options.warmup_requests)
            if warm.errors:
                raise RuntimeError(f"warm-up of {system} {endpoint} failed: {warm.error_samples}")
    log(f"e2e: warmed up; {options.repeats} repeats x {len(ENDPOINTS)} endpoints x {len(options.levels)} client counts "
        f"x {len(SYSTEMS)} systems x {options.duration_s:g}s")
    results: Results = {}
    offset = 0
    for repeat in range(options.repeats):
        for endpoint in ENDPOINTS:
            for clients in options.levels:
                line = []
                for system in order_for(repeat):
                    result = await systems.measure(system, endpoint, clients=clients, queries=queries, offset=offset,
                                                   duration_s=options.duration_s)
                    results.setdefault((system, endpoint, clients), []).append(result)
                    line.append(f"{system} {result.rate:.1f} req/s p50 {result.latency(50):.0f} ms"
                                + (f" ({result.errors} errors: {result.error_samples[0]})" if result.errors else ""))
                offset += 97  # the next cell starts elsewhere in the query list
                log(f"  repeat {repeat + 1}/{options.repeats} /api/{endpoint} {clients} clients: "
                    + ", ".join(line) + f" (load {load_average():.1f})")
    return results


async def _run(dataset_dir: Path, options: Options, log: Log, context: dict[str, object]) -> Results:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from bench.cairn_system import CairnSystem, offline_generator
    from bench.chunks import load_chunks
    from bench.floor import Floor
    from bench.haystack_pipeline import HaystackPipelines
    from bench.index import ensure_index
    from services.retrieval.adapters.embedder import embedder_from_settings
    from services.retrieval.settings import Settings

    settings = Settings()
    index, info = await ensure_index(settings, dataset_dir)
    log(f"e2e: index of {info['chunks']} chunks ({'reused' if info['reused'] else 'built now'}) at {index}")
    queries = scifact_queries(dataset_dir)
    with tempfile.TemporaryDirectory(prefix="cairn-bench-e2e-") as scratch_dir:
        scratch = Path(scratch_dir)
        llm = offline_generator(scratch)
        cairn = CairnSystem(index=index, scratch=scratch, llm_url=None, llm_model=LLM_MODEL, candidates=CANDIDATES)
        systems = None
        try:
            llm.start()
            cairn_started = asyncio.create_task(asyncio.to_thread(cairn.start, log))
            started = time.perf_counter()
            chunks = await asyncio.to_thread(load_chunks, index, settings)
            embedder = await asyncio.to_thread(embedder_from_settings, settings, cache_size=0)
            floor = await asyncio.to_thread(Floor, chunks, embedder=embedder, candidates=CANDIDATES)
            haystack = await asyncio.to_thread(
                HaystackPipelines, chunks, model=settings.model_path(), llm_url=llm.url, llm_model=LLM_MODEL,
                candidates=CANDIDATES, search_top_k=SEARCH_TOP_K, chat_top_k=CHAT_TOP_K,
            )
            log(f"e2e: floor and Haystack pipelines ready in {time.perf_counter() - started:.1f}s "
                f"({len(chunks)} chunks; Haystack's document vectors are the index's stored ones, not re-encoded)")
            await asyncio.to_thread(llm.wait_ready)
            await cairn_started
            systems = Systems(cairn_url=cairn.url, headers=await cairn.login(), floor=floor, haystack=haystack,
                              threads=max(options.levels))
            # As every Cairn service does once started: what the floor and the Haystack pipeline loaded is
            # kept out of the garbage collector's full walks, so neither pays for them.
            freeze_what_is_loaded()
            results = await _measure_all(systems, queries, options, log)
            context["rss_mb"] = {name: round(mb, 1) for name, mb in cairn.rss_mb().items()}
            context["index"] = {"path": str(index), **info}
            return results
        finally:
            gc.unfreeze()  # bench.run goes on to other sections in this process
            if systems is not None:
                systems.close()
            await cairn.close()
            llm.stop()


def run(*, dataset_dir: Path, options: Options, log: Log, context: dict[str, object] | None = None) -> list[Figure]:
    """The section for bench.run: its figures; the table, RSS and settings go into `context["e2e"]`."""
    from services.retrieval.adapters.embedder import configure_thread_pools

    configure_thread_pools()  # BLAS held to one thread, as the retrieval service holds it
    details: dict[str, object] = {}
    results = asyncio.run(_run(dataset_dir, options, log, details))
    table = markdown_table(results, options.levels)
    rss = details.get("rss_mb", {})
    summary = {
        "table_markdown": table,
        "rss_mb_after_run": rss,
        "options": {"duration_s": options.duration_s, "repeats": options.repeats, "levels": list(options.levels)},
        "cells": [{"system": s, "endpoint": e, "clients": c, "repeats": [r.as_dict() for r in runs]}
                  for (s, e, c), runs in sorted(results.items())],
    }
    if context is not None:
        context["e2e"] = summary
    log("e2e: medians over repeats (errors summed); ratios are medians of per-repeat ratios\n" + table)
    log("e2e: resident memory of each Cairn service after the run: "
        + ", ".join(f"{name} {mb:.0f} MiB" for name, mb in rss.items()))
    return figures_from(results, options.levels)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dataset = scifact_dir(args.scifact)
    if not dataset.is_dir():
        print(f"error: no SciFact folder at {dataset} (give --scifact or CAIRN_EVALSETS)", file=sys.stderr)
        return 2
    log: Log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    context: dict[str, object] = {}
    load_before = load_average()
    figures = run(dataset_dir=dataset, options=options_from(args), log=log, context=context)
    print(format_table(figures))
    e2e = context["e2e"]
    print(e2e["table_markdown"])
    print("RSS after the run (MiB): " + json.dumps(e2e["rss_mb_after_run"]))
    print(f"load average {load_before:.2f} -> {load_average():.2f} on {os.cpu_count()} CPUs")
    return 1 if args.strict and any(f.passed is False for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
