"""POST /chat over real HTTP against the same pipeline called in-process, in the same run.

A retrieval process serves a few hundred SciFact abstracts (the ones the sampled queries are judged
against, so answers get written); a chat process with the offline generator calls it. In this process
the chat app's own lifespan wires an identical pipeline (same settings, same retrieval process, same
generator, events to the same broker) and `pipeline.answer` is called directly. Each query goes both
ways, alternating which goes first, after a warm-up that fills retrieval's query cache so both read
the same cached vectors. Every sample has its own generation time (timings_ms.generation) subtracted:
what is left is retrieval plus chat's own work, and the difference between the two paths is what the
chat service adds (HTTP, validation, serialisation).
"""
from __future__ import annotations

import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import aio_pika
import httpx

from bench.common import Figure, load_average, percentile
from bench.processes import ServiceProcess
from services.chat.main import create_app
from services.chat.models import ChatRequest
from services.chat.settings import Settings as ChatSettings
from services.retrieval.evaluation.beir import load_beir
from shared.caller import Caller
from shared.web import SERVICE_TOKEN_HEADER

QUERIES_PER_REPEAT = 60
CALLER = Caller(user_id="bench", roles=("user",), session_id="bench")
HEADERS = {"X-User-Id": "bench", "X-User-Roles": "user", "X-Session-Id": "bench"}


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


async def _measure(chat: ServiceProcess, settings: ChatSettings, queries: list[str], repeats: int, log) -> dict[str, list[list[float]]]:
    """Per repeat, generation-subtracted milliseconds for each path."""
    app = create_app(settings)
    samples: dict[str, list[list[float]]] = {"http": [], "in_process": []}
    answered = 0
    headers = {SERVICE_TOKEN_HEADER: chat.token, **HEADERS}
    async with app.router.lifespan_context(app), httpx.AsyncClient(base_url=chat.url, headers=headers, timeout=60) as client:
        pipeline = app.state.pipeline

        async def over_http(query: str) -> float:
            nonlocal answered
            started = time.perf_counter()
            response = await client.post("/chat", json={"query": query})
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                raise RuntimeError(f"/chat answered {response.status_code}: {response.text[:300]}")
            body = response.json()
            answered += bool(body["citations"])
            return elapsed - body["metadata"]["timings_ms"]["generation"]

        async def in_process(query: str) -> float:
            started = time.perf_counter()
            answer = await pipeline.answer(request=ChatRequest(query=query), caller=CALLER)
            return (time.perf_counter() - started) * 1000 - answer.metadata.timings_ms.generation

        for query in queries:  # warm-up: retrieval caches every query vector, both paths load their code
            await over_http(query)
            await in_process(query)
        log(f"  {answered} of {len(queries)} queries answered with citations (the rest: no relevant passage)")
        for repeat in range(repeats):
            http, local = [], []
            for i, query in enumerate(queries):
                if (i + repeat) % 2 == 0:
                    http.append(await over_http(query))
                    local.append(await in_process(query))
                else:
                    local.append(await in_process(query))
                    http.append(await over_http(query))
            samples["http"].append(http)
            samples["in_process"].append(local)
            log(
                f"  repeat {repeat + 1}/{repeats}: POST /chat p50 {statistics.median(http):.1f} ms, "
                f"in-process p50 {statistics.median(local):.1f} ms (generation subtracted; load {load_average():.1f})"
            )
    return samples


def run(*, dataset_dir: Path, repeats: int, log=print) -> list[Figure]:
    queries, bodies = _sample(dataset_dir, QUERIES_PER_REPEAT)
    p50 = Figure(
        name="POST /chat p50, generation subtracted", unit="ms", kind="excess", target=10.0,
        baseline_name="same pipeline in-process",
        note=f"{len(queries)} SciFact queries over {len(bodies)} abstracts; offline generator; real retrieval over HTTP",
    )
    p95 = Figure(
        name="POST /chat p95, generation subtracted", unit="ms", kind="excess", target=None,
        baseline_name="same pipeline in-process p95",
    )
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
            samples = asyncio.run(_measure(chat, settings, queries, repeats, log))
        finally:
            chat.stop()
            retrieval.stop()
            asyncio.run(_delete_broker_names(settings.amqp_url, exchange, queue))
    for http, local in zip(samples["http"], samples["in_process"]):
        p50.add(statistics.median(http), statistics.median(local))
        p95.add(percentile(http, 95), percentile(local, 95))
    return [p50, p95]
