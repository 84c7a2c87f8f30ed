"""The chat service's own overhead: POST /chat and the first token of POST /chat/stream over real HTTP
against the same pipeline called in-process, in the same run.

A retrieval process serves a few hundred SciFact abstracts (the ones the sampled queries are judged
against, so answers get written); a chat process with the offline generator calls it. In this process
the chat app's own lifespan wires an identical pipeline (same settings, same retrieval process, same
generator, events to the same broker), called directly: `pipeline.answer` for /chat, `open_stream`
for /chat/stream. Each query goes all four ways, alternating which path goes first, after a warm-up
that fills retrieval's query cache so both read the same cached vectors. What is left after the model's
own time is retrieval plus chat's own work; the difference between the two paths is what the chat
service adds (HTTP, validation, serialisation, SSE framing).

What is subtracted, and why it is fair:
- POST /chat: each sample's own generation time (`timings_ms.generation`, reported by whichever
  process ran it).
- /chat/stream, time to first token (HTTP: from sending the request until the first `event: token`
  line arrives; in-process: from calling `open_stream` until its first token event): the generator's
  own time to its first text delta. The service does not report that, so the in-process pipeline's
  generator is wrapped to time it, and for each query the median over the run's repeats is subtracted
  from both paths alike. The offline generator is deterministic (same prompt, same work), so its
  latency per query is stable; and because both paths lose the same amount per query, the overhead
  figure is the difference of the raw times, whatever the estimate's error. That the generator runs
  as fast inside the chat process as here is checked, not assumed: the /chat generation times the
  two processes report are compared in the figure's note. (The offline generator's first delta comes
  only after its whole answer: it picks its sentences before it sends a word. A real model endpoint
  streams as it writes; the subtraction covers both.)
Queries without a relevant passage never reach the generator (nothing is subtracted for them; their
one token follows the post-processing); the warm-up logs how many reached it. The offline generator
refuses in words when the passages do not cover the question: that answer, shown as "no information"
because it cites nothing, is still streamed and timed like any other.

Also from the same samples: what the offline generator and the grounding check cost inside a real
POST /chat and /chat/stream (`timings_ms.generation + citations`, reported by the chat process),
against the issue's budget.
"""
from __future__ import annotations

import asyncio
import json
import secrets
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import aio_pika
import httpx

from bench.common import Figure, load_average, percentile
from bench.processes import ServiceProcess
from services.chat.main import create_app
from services.chat.models import ChatRequest
from services.chat.pipeline import ChatPipeline
from services.chat.ports import Generation, Generator
from services.chat.settings import Settings as ChatSettings
from services.chat.streaming import open_stream
from services.retrieval.evaluation.beir import load_beir
from shared.caller import Caller
from shared.web import SERVICE_TOKEN_HEADER

QUERIES_PER_REPEAT = 60
OVERHEAD_TARGET_MS = 10.0
GENERATION_BUDGET_MS = 30.0  # the budget for the offline generator and the grounding check together
CALLER = Caller(user_id="bench", roles=("user",), session_id="bench")
HEADERS = {"X-User-Id": "bench", "X-User-Roles": "user", "X-Session-Id": "bench"}
FIRST_TOKEN_LINE = "event: token"

Row = dict[str, float]  # one query's raw milliseconds, by series name
Series = dict[str, list[list[float]]]  # per series, per repeat, per query


def _sample(dataset_dir: Path, count: int) -> tuple[list[str], list[dict[str, str]]]:
    """`count` judged test queries and the abstracts they are judged against, plus as many others."""
    dataset = load_beir(dataset_dir, split="test")
    query_ids = list(dataset.queries)[:count]
    wanted = dict.fromkeys(doc for qid in query_ids for doc in dataset.qrels.get(qid, {}))
    fillers = [doc for doc in dataset.corpus if doc not in wanted][: len(wanted)]
    docs = [dataset.corpus[doc] for doc in [*wanted, *fillers] if doc in dataset.corpus]
    bodies = [{"doc_id": d.doc_id, "title": d.title or d.doc_id, "text": d.text, "category": "scifact"} for d in docs]
    return [dataset.queries[qid] for qid in query_ids], bodies


async def _ingest(retrieval: ServiceProcess, bodies: list[dict[str, str]]) -> None:
    limit = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=retrieval.url, headers={SERVICE_TOKEN_HEADER: retrieval.token}, timeout=300) as client:

        async def one(body: dict[str, str]) -> None:
            async with limit:
                response = await client.post("/documents", json=body)
            if response.status_code != 200:
                raise RuntimeError(f"ingest of {body['doc_id']} answered {response.status_code}: {response.text[:300]}")

        await asyncio.gather(*(one(b) for b in bodies))


async def _delete_broker_names(amqp_url: str, exchange: str, queue: str) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        for name in (queue, f"{queue}.dead"):
            await channel.queue_delete(name)
        for name in (f"{queue}.dlx", exchange):
            await channel.exchange_delete(name)


class FirstDeltaTimer:
    """The Generator port around another, noting how long its latest stream took to the first text."""

    def __init__(self, inner: Generator) -> None:
        self._inner = inner
        self.first_delta_ms: float | None = None

    async def generate(self, **options: Any) -> Generation:
        return await self._inner.generate(**options)

    async def stream(self, **options: Any) -> AsyncIterator[str | Generation]:
        self.first_delta_ms = None
        started = time.perf_counter()
        async with aclosing(self._inner.stream(**options)) as deltas:
            async for item in deltas:
                if self.first_delta_ms is None and isinstance(item, str):
                    self.first_delta_ms = _ms_since(started)
                yield item

    async def ping(self) -> bool:
        return await self._inner.ping()


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


class _Paths:
    """The four ways one query is timed; each returns raw milliseconds, with what may be subtracted."""

    def __init__(self, *, client: httpx.AsyncClient, pipeline: ChatPipeline, timer: FirstDeltaTimer) -> None:
        self.client = client
        self.pipeline = pipeline
        self.timer = timer
        self.kinds: Counter[str] = Counter()  # of the answers over HTTP, and how many the model wrote

    async def chat_over_http(self, query: str) -> Row:
        started = time.perf_counter()
        response = await self.client.post("/chat", json={"query": query})
        elapsed = _ms_since(started)
        if response.status_code != 200:
            raise RuntimeError(f"/chat answered {response.status_code}: {response.text[:300]}")
        body = response.json()
        timings = body["metadata"]["timings_ms"]
        self.kinds.update([body["metadata"]["kind"], "model asked" if timings["generation"] else "model not asked"])
        return {"chat_http": elapsed, "generation_http": timings["generation"], "citations_http": timings["citations"]}

    async def chat_in_process(self, query: str) -> Row:
        started = time.perf_counter()
        answer = await self.pipeline.answer(request=ChatRequest(query=query), caller=CALLER)
        return {"chat_local": _ms_since(started), "generation_local": answer.metadata.timings_ms.generation}

    async def first_token_over_http(self, query: str) -> Row:
        started = time.perf_counter()
        first_token, last_event, done = None, None, None
        async with self.client.stream("POST", "/chat/stream", json={"query": query}) as response:
            if response.status_code != 200:
                raise RuntimeError(f"/chat/stream answered {response.status_code}: {(await response.aread())[:300]!r}")
            async for line in response.aiter_lines():  # read to the end, so no work spills into the next sample
                if line.startswith("event: "):
                    last_event = line
                    if first_token is None and line == FIRST_TOKEN_LINE:
                        first_token = _ms_since(started)
                elif line.startswith("data: ") and last_event == "event: done":
                    done = json.loads(line.removeprefix("data: "))
        if first_token is None or done is None:
            raise RuntimeError(f"/chat/stream for {query!r} ended with {last_event!r}, first token {first_token}")
        timings = done["metadata"]["timings_ms"]
        return {"ttft_http": first_token, "stream_generation_http": timings["generation"],
                "stream_citations_http": timings["citations"]}

    async def first_token_in_process(self, query: str) -> Row:
        started = time.perf_counter()
        first_token, last_event = None, None
        self.timer.first_delta_ms = None  # stays None when the turn never reaches the model
        events = await open_stream(self.pipeline, request=ChatRequest(query=query), caller=CALLER)
        async with aclosing(events):
            async for item in events:
                last_event = item.event
                if first_token is None and item.event == "token":
                    first_token = _ms_since(started)
        if first_token is None or last_event != "done":
            raise RuntimeError(f"open_stream for {query!r} ended with {last_event!r}, first token {first_token}")
        return {"ttft_local": first_token, "first_delta": self.timer.first_delta_ms or 0.0}

    async def one_query(self, query: str, *, http_first: bool) -> Row:
        row: Row = {}
        pairs = ((self.chat_over_http, self.chat_in_process), (self.first_token_over_http, self.first_token_in_process))
        for over_http, in_process in pairs:
            for path in (over_http, in_process) if http_first else (in_process, over_http):
                row |= await path(query)
        return row


async def _measure(chat: ServiceProcess, settings: ChatSettings, queries: list[str], repeats: int, log) -> Series:
    """Per series, per repeat, the raw milliseconds of every query."""
    app = create_app(settings)
    series: Series = {}
    headers = {SERVICE_TOKEN_HEADER: chat.token, **HEADERS}
    async with app.router.lifespan_context(app), httpx.AsyncClient(base_url=chat.url, headers=headers, timeout=60) as client:
        pipeline: ChatPipeline = app.state.pipeline
        timer = FirstDeltaTimer(pipeline.generator)
        pipeline.generator = timer
        paths = _Paths(client=client, pipeline=pipeline, timer=timer)
        for query in queries:  # warm-up: retrieval caches every query vector, both paths load their code
            await paths.one_query(query, http_first=True)
        log(f"  warm-up of {len(queries)} queries: {', '.join(f'{k} {n}' for k, n in sorted(paths.kinds.items()))}")
        for repeat in range(repeats):
            rows = [await paths.one_query(q, http_first=(i + repeat) % 2 == 0) for i, q in enumerate(queries)]
            for name in rows[0]:
                series.setdefault(name, []).append([row[name] for row in rows])
            log(_repeat_line(rows, repeat, repeats))
    return series


def _repeat_line(rows: list[Row], repeat: int, repeats: int) -> str:
    def p50(name: str) -> float:
        return statistics.median(row[name] for row in rows)

    return (
        f"  repeat {repeat + 1}/{repeats} (raw p50s): POST /chat {p50('chat_http'):.1f} ms, "
        f"in-process {p50('chat_local'):.1f} ms; "
        f"first token over HTTP {p50('ttft_http'):.1f} ms, in-process {p50('ttft_local'):.1f} ms, "
        f"generator's first delta {p50('first_delta'):.1f} ms (load {load_average():.1f})"
    )


def _minus_each(rows: list[list[float]], subtracted: list[list[float]]) -> list[list[float]]:
    return [[v - s for v, s in zip(row, sub)] for row, sub in zip(rows, subtracted)]


def _minus_per_query(rows: list[list[float]], per_query: list[float]) -> list[list[float]]:
    return [[v - s for v, s in zip(row, per_query)] for row in rows]


def _per_query_median(rows: list[list[float]]) -> list[float]:
    return [statistics.median(values) for values in zip(*rows)]


def _p50_and_p95(
    measured: str, subtracted: str, http: list[list[float]], local: list[list[float]], *, note: str
) -> list[Figure]:
    p50 = Figure(name=f"{measured} p50, {subtracted}", unit="ms", kind="excess", target=OVERHEAD_TARGET_MS,
                 baseline_name="same pipeline in-process", note=note)
    p95 = Figure(name=f"{measured} p95, {subtracted}", unit="ms", kind="excess", target=None,
                 baseline_name="same pipeline in-process p95")
    for over_http, in_process in zip(http, local):
        p50.add(statistics.median(over_http), statistics.median(in_process))
        p95.add(percentile(over_http, 95), percentile(in_process, 95))
    return [p50, p95]


def _figures(series: Series, *, sample_note: str) -> list[Figure]:
    first_delta = _per_query_median(series["first_delta"])
    generation_http = statistics.median(v for row in series["generation_http"] for v in row)
    generation_local = statistics.median(v for row in series["generation_local"] for v in row)
    chat = _p50_and_p95(
        "POST /chat", "generation subtracted",
        _minus_each(series["chat_http"], series["generation_http"]),
        _minus_each(series["chat_local"], series["generation_local"]),
        note=sample_note,
    )
    first_token = _p50_and_p95(
        "/chat/stream first token", "model's first delta subtracted",
        _minus_per_query(series["ttft_http"], first_delta),
        _minus_per_query(series["ttft_local"], first_delta),
        note=(
            f"per query, the median in-process first delta subtracted from both paths "
            f"(p50 {statistics.median(first_delta):.1f} ms); "
            f"/chat generation p50 in the chat process {generation_http:.1f} ms vs here {generation_local:.1f} ms"
        ),
    )
    budgets = [
        _budget("POST /chat", series["generation_http"], series["citations_http"]),
        _budget("/chat/stream", series["stream_generation_http"], series["stream_citations_http"],
                also="streamed: the generation time includes sending each word to the client"),
    ]
    return [*chat, *first_token, *budgets]


def _budget(path: str, generation: list[list[float]], citations: list[list[float]], *, also: str = "") -> Figure:
    """What the offline generator plus citations and the grounding check took, as the chat process reports it."""
    figure = Figure(
        name=f"offline generation + citations/grounding in {path} p50", unit="ms", kind="excess",
        target=GENERATION_BUDGET_MS, baseline_name="nothing",
        note="; ".join(filter(None, ["timings_ms.generation + citations from the chat process, SciFact passages", also])),
    )
    for generation_row, citations_row in zip(generation, citations):
        figure.add(statistics.median(g + c for g, c in zip(generation_row, citations_row)), 0.0)
    return figure


def run(*, dataset_dir: Path, repeats: int, log=print) -> list[Figure]:
    queries, bodies = _sample(dataset_dir, QUERIES_PER_REPEAT)
    token = secrets.token_urlsafe(24)
    bench_id = secrets.token_hex(4)
    exchange, queue = f"cairn.bench.{bench_id}.events", f"cairn.bench.{bench_id}.analytics"
    with tempfile.TemporaryDirectory(prefix="cairn-bench-chat-") as scratch:
        retrieval = ServiceProcess(
            service="retrieval", name="retrieval", scratch=Path(scratch), token=token,
            env={"CAIRN_DATA_DIR": str(Path(scratch) / "retrieval")},
        )
        events = {"EVENTS_EXCHANGE": exchange, "ANALYTICS_QUEUE": queue}
        chat = ServiceProcess(
            service="chat", name="chat", scratch=Path(scratch), token=token,
            env={"RETRIEVAL_URL": retrieval.url, **events},
        )
        settings = ChatSettings(retrieval_url=retrieval.url, service_token=token, events_exchange=exchange, analytics_queue=queue)
        try:
            retrieval.start()
            log(f"chat: retrieval ready in {retrieval.wait_ready():.1f}s; ingesting {len(bodies)} abstracts")
            started = time.perf_counter()
            asyncio.run(_ingest(retrieval, bodies))
            log(f"chat: ingested in {time.perf_counter() - started:.1f}s")
            chat.start()
            log(f"chat: chat ready in {chat.wait_ready():.1f}s")
            series = asyncio.run(_measure(chat, settings, queries, repeats, log))
        finally:
            chat.stop()
            retrieval.stop()
            asyncio.run(_delete_broker_names(settings.amqp_url, exchange, queue))
    note = f"{len(queries)} SciFact queries over {len(bodies)} abstracts; offline generator; real retrieval over HTTP"
    return _figures(series, sample_note=note)
