"""`make soak` (`python -m bench.soak`): Cairn as real processes (bench.cairn_system, on the SciFact bench
index, the offline generator over HTTP) under moderate, bounded load for --minutes: --clients clients
paced to --rate requests/s in all, alternating /api/search and /api/chat, at most rate x duration requests.

Checks, each printed, exit 1 on a miss:
- no request failed;
- the resident memory of each service, sampled every --sample-s seconds, grows less than --max-growth
  after the warm-up (--warmup-minutes): the median of the last three samples against the median of the
  first three after the warm-up;
- once the load stops, the chat and gateway outboxes drain to zero (`cairn_outbox_events` on /metrics);
- analytics counted every chat request exactly once: its summary's queries and completed requests both
  equal the chat requests sent (the run has its own exchange, queue and analytics database).
"""
from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.common import load_average, scifact_dir
from bench.load import LoadResult, run_load

SEARCH_TOP_K = 10
DRAIN_TIMEOUT_S = 60.0
OUTBOXES = ("chat", "gateway")
EDGE_SAMPLES = 3  # samples whose median stands for the memory at the warm-up's end and at the run's end
Log = Callable[[str], None]
Sample = tuple[float, dict[str, float]]  # seconds since the load started, MiB per service


@dataclass(frozen=True)
class Growth:
    service: str
    after_warmup_mb: float
    end_mb: float
    peak_mb: float

    @property
    def growth(self) -> float:
        return self.end_mb / self.after_warmup_mb - 1 if self.after_warmup_mb else math.nan


def memory_growth(samples: list[Sample], *, warmup_s: float) -> list[Growth]:
    """Per service: the median of the first EDGE_SAMPLES samples taken at or after `warmup_s` against the
    median of the last EDGE_SAMPLES, and the peak after the warm-up."""
    after = [sizes for at, sizes in samples if at >= warmup_s]
    if len(after) < 2:
        raise ValueError(f"need at least 2 memory samples after the warm-up, got {len(after)}")
    edge = min(EDGE_SAMPLES, len(after) // 2)
    return [
        Growth(
            service=service,
            after_warmup_mb=statistics.median(s[service] for s in after[:edge]),
            end_mb=statistics.median(s[service] for s in after[-edge:]),
            peak_mb=max(s[service] for s in after),
        )
        for service in after[0]
    ]


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=_positive_float, default=10.0, help="how long the load runs (default 10)")
    parser.add_argument("--warmup-minutes", type=float, default=2.0, help="memory growth is measured after this (default 2)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument("--rate", type=_positive_float, default=6.0, help="requests per second, all clients together (default 6)")
    parser.add_argument("--sample-s", type=_positive_float, default=10.0, help="seconds between memory samples (default 10)")
    parser.add_argument("--max-growth", type=_positive_float, default=0.10, help="largest memory growth after warm-up (default 0.10)")
    parser.add_argument("--scifact", help="BEIR SciFact folder (default: $CAIRN_EVALSETS/scifact or ../shared/evalsets/scifact)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.clients < 1:
        parser.error("--clients must be >= 1")
    if not 0 <= args.warmup_minutes < args.minutes:
        parser.error("--warmup-minutes must be >= 0 and shorter than --minutes")
    if (args.minutes - args.warmup_minutes) * 60 < 2 * args.sample_s:
        parser.error("the run after the warm-up must hold at least two memory samples (see --sample-s)")
    return args


@dataclass
class Report:
    load: LoadResult | None = None
    chat_sent: int = 0
    searches_sent: int = 0
    samples: list[Sample] = field(default_factory=list)
    growth: list[Growth] = field(default_factory=list)
    outboxes: dict[str, float] = field(default_factory=dict)
    analytics: dict[str, int] = field(default_factory=dict)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)  # what, passed, detail

    def check(self, what: str, passed: bool, detail: str) -> None:
        self.checks.append((what, passed, detail))

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(ok for _, ok, _ in self.checks)


async def _until(probe: Callable[[], Awaitable[bool]], *, timeout_s: float, every_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if await probe():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every_s)


async def _sample_memory(system, report: Report, started: float, every_s: float) -> None:
    while True:
        report.samples.append((time.monotonic() - started, system.rss_mb()))
        await asyncio.sleep(every_s)


async def _load(system, headers: dict[str, str], queries: list[str], args: argparse.Namespace, report: Report) -> None:
    duration_s = args.minutes * 60
    connector = aiohttp.TCPConnector(limit=args.clients)
    async with aiohttp.ClientSession(
        base_url=system.url, headers=headers, connector=connector, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:

        async def call(number: int) -> None:
            query = queries[number // 2 % len(queries)]
            if number % 2:
                report.chat_sent += 1
                path, body = "/api/chat", {"query": query}
            else:
                report.searches_sent += 1
                path, body = "/api/search", {"query": query, "top_k": SEARCH_TOP_K}
            async with session.post(path, json=body) as response:
                text = await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{path} answered {response.status}: {text[:200]!r}")

        started = time.monotonic()
        sampler = asyncio.create_task(_sample_memory(system, report, started, args.sample_s))
        try:
            report.load = await run_load(
                call, clients=args.clients, duration_s=duration_s, interval_s=args.clients / args.rate,
                max_requests=math.ceil(args.rate * duration_s),
            )
        finally:
            sampler.cancel()
        report.samples.append((time.monotonic() - started, system.rss_mb()))


async def _drained(system, report: Report) -> None:
    async def empty() -> bool:
        report.outboxes = {service: await system.metric(service, "cairn_outbox_events") for service in OUTBOXES}
        return not any(report.outboxes.values())

    drained = await _until(empty, timeout_s=DRAIN_TIMEOUT_S)
    report.check("outboxes drained", drained, ", ".join(f"{s} {n:g}" for s, n in report.outboxes.items()))


async def _counted(system, headers: dict[str, str], report: Report) -> None:
    async with aiohttp.ClientSession(base_url=system.url, headers=headers) as session:

        async def summary() -> bool:
            async with session.get("/api/analytics/summary") as response:
                body = await response.json()
            report.analytics = {"queries": body["queries"], "completed": body["completed"], "failed": body["failed"]}
            return body["queries"] >= report.chat_sent and body["completed"] >= report.chat_sent

        await _until(summary, timeout_s=DRAIN_TIMEOUT_S)
        await asyncio.sleep(2)  # anything counted twice would arrive about now
        await summary()
    counted = report.analytics.get("queries") == report.chat_sent == report.analytics.get("completed")
    report.check("analytics counted each chat request once", counted,
                 f"{report.chat_sent} sent; summary {report.analytics}")


async def _soak(args: argparse.Namespace, dataset_dir: Path, log: Log) -> Report:
    from bench.cairn_system import CairnSystem, offline_generator
    from bench.e2e import CANDIDATES, LLM_MODEL, scifact_queries
    from bench.index import ensure_index
    from services.retrieval.settings import Settings

    index, info = await ensure_index(Settings(), dataset_dir)
    log(f"soak: index of {info['chunks']} chunks at {index}")
    queries = scifact_queries(dataset_dir)
    report = Report()
    with tempfile.TemporaryDirectory(prefix="cairn-soak-") as scratch_dir:
        scratch = Path(scratch_dir)
        llm = offline_generator(scratch)
        system = CairnSystem(index=index, scratch=scratch, llm_url=llm.url, llm_model=LLM_MODEL, candidates=CANDIDATES)
        try:
            llm.start()
            await asyncio.to_thread(system.start, log)
            await asyncio.to_thread(llm.wait_ready)
            headers = await system.login()
            log(f"soak: {args.minutes:g} min, {args.clients} clients at {args.rate:g} req/s in all "
                f"(load {load_average():.1f})")
            await _load(system, headers, queries, args, report)
            load = report.load
            report.check("no failed request", load.errors == 0,
                         f"{load.requests} requests ({report.searches_sent} searches, {report.chat_sent} chats), "
                         f"{load.errors} failed {load.error_samples[:2]}")
            report.growth = memory_growth(report.samples, warmup_s=args.warmup_minutes * 60)
            for g in report.growth:
                report.check(f"{g.service} memory growth after warm-up", g.growth < args.max_growth,
                             f"{g.after_warmup_mb:.0f} -> {g.end_mb:.0f} MiB ({g.growth:+.1%}; peak {g.peak_mb:.0f})")
            await _drained(system, report)
            await _counted(system, headers, report)
        finally:
            await system.close()
            llm.stop()
    return report


def format_report(report: Report) -> str:
    lines = []
    if report.load is not None:
        load = report.load
        lines.append(f"load: {load.requests} requests in {load.seconds:.0f}s ({load.rate:.2f}/s), p50 {load.latency(50):.0f} ms, "
                     f"p95 {load.latency(95):.0f} ms, p99 {load.latency(99):.0f} ms, {load.errors} errors")
    if report.samples:
        shown = report.samples[:: max(1, len(report.samples) // 8)] + report.samples[-1:]  # about 9 columns
        lines.append("resident memory (MiB)  " + " ".join(f"{f'{at:.0f}s':>6}" for at, _ in shown))
        for service in shown[0][1]:
            lines.append(f"  {service:<21}" + " ".join(f"{sizes[service]:6.0f}" for _, sizes in shown))
    width = max((len(what) for what, _, _ in report.checks), default=10)
    for what, passed, detail in report.checks:
        lines.append(f"{'PASS' if passed else 'FAIL'}  {what:<{width}}  {detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    dataset = scifact_dir(args.scifact)
    if not dataset.is_dir():
        print(f"error: no SciFact folder at {dataset} (give --scifact or CAIRN_EVALSETS)", file=sys.stderr)
        return 2
    log: Log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    report = asyncio.run(_soak(args, dataset, log))
    print(format_report(report))
    print("soak " + ("passed" if report.passed else "FAILED"))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
