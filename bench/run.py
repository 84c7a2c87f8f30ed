"""`make bench`: the retrieval and chat speed figures, each against a baseline measured in the same run,
as the median of several repeats (this machine's speed drifts within an hour; only same-run ratios compare).

Sections: threads (why BLAS is held to one thread), ingest (real ingestion path vs bare encode, per
backend), http (/search p50 vs bare encode, and throughput with vs without micro-batching, over real
HTTP on a ~20k-chunk SciFact index built once and kept under CAIRN_DATA_DIR/bench/), chat (POST /chat
and /chat/stream's first token over HTTP vs the same pipeline in-process, the model's own time
subtracted), grounding (what the offline generator and the grounding check cost per request), events
(events/s from publish to committed row through the publisher and an analytics process vs a raw aio-pika
publish/consume loop), hops (one HTTP hop under 32 concurrent callers: httpx's client vs aiohttp's),
e2e (Cairn's processes through the gateway vs the same work in one process and vs a Haystack pipeline,
1/8/32 clients; it too loads the model in this process; bench/e2e.py).

Only threads, ingest and http load the embedding model (torch) in this process; grounding and events do
without SciFact, so `--only grounding` runs in seconds and `--only events` in about a minute.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from bench.common import Figure, format_table, load_average, scifact_dir
from services.retrieval.settings import Settings

SECTIONS = ("threads", "ingest", "http", "chat", "grounding", "events", "hops", "e2e")
MODEL_SECTIONS = {"threads", "ingest", "http"}  # these load the embedding model here
SCIFACT_SECTIONS = {"threads", "ingest", "http", "chat", "e2e"}
CHAT_SECTIONS = {"chat", "grounding"}
Log = Callable[[str], None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="repeats per figure; the median is reported (default 3)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--ingest-docs", type=int, default=120, help="SciFact documents per ingest repeat (default 120)")
    parser.add_argument("--scifact", help="BEIR SciFact folder (default: $CAIRN_EVALSETS/scifact or ../shared/evalsets/scifact)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a figure misses its target")
    parser.add_argument("--e2e-duration", type=float, default=10.0, help="e2e: seconds per system and client count (default 10)")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")

    settings = Settings()
    dataset = scifact_dir(args.scifact)
    if SCIFACT_SECTIONS & set(sections) and not dataset.is_dir():
        print(f"error: no SciFact folder at {dataset} (give --scifact or CAIRN_EVALSETS)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    load_before = load_average()
    log: Log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    context: dict[str, object] = {}
    figures = _retrieval_figures(sections, args=args, settings=settings, dataset=dataset, context=context, log=log)
    figures += _chat_figures(sections, args=args, dataset=dataset, log=log)
    if "events" in sections:
        from bench import events

        figures += events.run(repeats=args.repeats, log=log)
    if "hops" in sections:
        from bench import hops

        figures += hops.run(repeats=args.repeats, log=log)
    if "e2e" in sections:
        from bench import e2e

        figures += e2e.run(dataset_dir=dataset, options=e2e.Options(duration_s=args.e2e_duration, repeats=args.repeats),
                           log=log, context=context)
    report = {
        "sections": sections,
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "torch_threads": settings.torch_threads,
        "load_average": {"start": round(load_before, 2), "end": round(load_average(), 2)},
        "seconds": round(time.perf_counter() - started, 1),
        **context,
        "figures": [f.as_dict() for f in figures],
    }
    _print_report(report, figures)
    out = settings.data_dir / "bench" / "last.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    return 1 if args.strict and any(f.passed is False for f in figures) else 0


def _retrieval_figures(
    sections: list[str], *, args: argparse.Namespace, settings: Settings, dataset: Path, context: dict[str, object], log: Log
) -> list[Figure]:
    """threads, ingest and http: the only sections that need torch and the model in this process."""
    if not MODEL_SECTIONS & set(sections):
        return []
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    from bench import retrieval_http, retrieval_ingest, retrieval_threads
    from bench.corpus import queries as read_queries
    from bench.index import ensure_index
    from services.retrieval.adapters.embedder import configure_thread_pools

    torch.set_num_threads(settings.torch_threads)
    bare = SentenceTransformer(str(settings.model_path()), device="cpu")
    queries = read_queries(dataset)
    figures: list[Figure] = []
    if "threads" in sections:
        log("threads: query encode beside numpy")
        figures += retrieval_threads.run(bare=bare, queries=queries, repeats=args.repeats, log=log)
    configure_thread_pools()  # from here on, as the service runs
    if "ingest" in sections:
        figures += retrieval_ingest.run(
            settings=settings, dataset_dir=dataset, bare=bare, repeats=args.repeats, sample=args.ingest_docs, log=log
        )
    if "http" in sections:
        index, info = asyncio.run(ensure_index(settings, dataset))
        context["index"] = {"path": str(index), **info}
        log(f"http: index of {info['chunks']} chunks ({'reused' if info['reused'] else 'built now'}: {info})")
        figures += retrieval_http.run(
            index=index, chunks=int(info["chunks"]), queries=queries, bare=bare,
            threads=settings.torch_threads, repeats=args.repeats, log=log,
        )
    return figures


def _chat_figures(sections: list[str], *, args: argparse.Namespace, dataset: Path, log: Log) -> list[Figure]:
    """chat (its retrieval process loads the model, this process does not) and grounding."""
    if not CHAT_SECTIONS & set(sections):
        return []
    from services.retrieval.adapters.embedder import configure_thread_pools

    configure_thread_pools()  # as the services run (a no-op when the retrieval sections did it)
    figures: list[Figure] = []
    if "chat" in sections:
        from bench import chat_http

        figures += chat_http.run(dataset_dir=dataset, repeats=args.repeats, log=log)
    if "grounding" in sections:
        from bench import chat_grounding

        log("grounding: offline answer + citations + grounding check, in-process")
        figures += chat_grounding.run(repeats=args.repeats, log=log)
    return figures


def _print_report(report: dict[str, object], figures: list[Figure]) -> None:
    print(format_table(figures))
    for figure in figures:
        if figure.note:
            print(f"  {figure.name}: {figure.note}")
    load = report["load_average"]
    print(f"load average {load['start']} -> {load['end']} on {report['cpus']} CPUs; {report['seconds']}s")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    sys.exit(main())
