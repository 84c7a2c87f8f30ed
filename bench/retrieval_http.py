"""/search over real HTTP against retrieval processes serving the ~20k-chunk SciFact index:

- one client: /search p50 (dense, hybrid) against a bare query encode p50 measured in this process in
  the same repeat (same model, same threads, same queries);
- 32 concurrent clients: /search throughput with micro-batching (query encodes and index lookups,
  EMBED_MAX_QUERY_BATCH=32 and SEARCH_MAX_QUERY_BATCH=32) against a second process with both off (1),
  measured alternately.

Both processes run the default torch backend with QUERY_CACHE_SIZE=0, so every request encodes. On that
backend a query is encoded by the model's fp32 ONNX copy (one at a time, also inside a micro-batch); the
bare baseline stays SentenceTransformer.encode, what a service without that copy would run.
"""
from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

from bench.common import Figure, load_average, percentile
from bench.processes import ServiceProcess
from shared.web import SERVICE_TOKEN_HEADER

CLIENTS = 32
# 768 requests a measurement: 256 took about a second on a fast machine, and its repeats spread 1.07-1.64x.
REQUESTS_PER_CLIENT = 24
RUN_LIMIT_S = 120.0  # a measurement stops issuing requests after this, whatever it has done
SINGLE_CLIENT_QUERIES = 100


class RetrievalProcess(ServiceProcess):
    """The retrieval service on a copy of the bench index."""

    def __init__(self, *, name: str, index: Path, scratch: Path, env: dict[str, str]) -> None:
        data_dir = scratch / name
        shutil.copytree(index / "chroma", data_dir / "chroma")
        super().__init__(
            service="retrieval",
            name=name,
            scratch=scratch,
            env={
                "CAIRN_DATA_DIR": str(data_dir),
                "CHROMA_COLLECTION": "bench",
                "QUERY_CACHE_SIZE": "0",
                "KEYWORD_SYNC_INTERVAL_S": "60",  # no other replica writes here; keeps the idle process quiet
            }
            | env,
        )


def _single_client_ms(server: RetrievalProcess, queries: list[str], *, mode: str) -> list[float]:
    samples = []
    with httpx.Client(base_url=server.url, headers={SERVICE_TOKEN_HEADER: server.token}, timeout=30) as client:
        for query in queries:
            started = time.perf_counter()
            response = client.post("/search", json={"query": query, "top_k": 10, "mode": mode})
            samples.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200 or not response.json()["results"]:
                raise RuntimeError(f"/search on {server.name} answered {response.status_code}: {response.text[:300]}")
    return samples


async def _load(server: RetrievalProcess, queries: list[str], *, mode: str) -> tuple[float, list[float]]:
    """CLIENTS workers, REQUESTS_PER_CLIENT requests each (fewer if RUN_LIMIT_S passes): requests/s and latencies."""
    latencies: list[float] = []
    failures: list[str] = []
    next_query = iter(range(len(queries) * 1000))
    deadline = time.monotonic() + RUN_LIMIT_S
    connector = aiohttp.TCPConnector(limit=CLIENTS)
    async with aiohttp.ClientSession(
        base_url=server.url, headers={SERVICE_TOKEN_HEADER: server.token}, connector=connector,
        timeout=aiohttp.ClientTimeout(total=60),
    ) as session:

        async def client() -> None:
            for _ in range(REQUESTS_PER_CLIENT):
                if time.monotonic() > deadline:
                    return
                query = queries[next(next_query) % len(queries)]
                started = time.perf_counter()
                async with session.post("/search", json={"query": query, "top_k": 10, "mode": mode}) as response:
                    await response.read()
                    if response.status != 200:
                        failures.append(f"{response.status}")
                latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(_connect(session) for _ in range(CLIENTS)))  # the connections are not what is timed
        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
        elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} failed requests to {server.name}: {failures[:5]}")
    return len(latencies) / elapsed, latencies


async def _connect(session: aiohttp.ClientSession) -> None:
    async with session.get("/healthz") as response:
        await response.read()


def run(*, index: Path, chunks: int, queries: list[str], bare, threads: int, repeats: int, log=print) -> list[Figure]:
    """`bare`: a loaded SentenceTransformer for the encode baseline."""
    modes = ("dense", "hybrid")
    latency = {
        mode: Figure(
            name=f"/search p50 {mode}, 1 client, {chunks} chunks", unit="ms", kind="excess", target=5.0,
            baseline_name="bare query encode p50", note="real HTTP to a retrieval process; baseline encodes the same queries in the bench process",
        )
        for mode in modes
    }
    throughput = {
        mode: Figure(
            name=f"/search throughput {mode}, {CLIENTS} clients", unit="req/s", kind="ratio", target=2.0,
            baseline_name="micro-batching off", note=f"{CLIENTS} aiohttp clients x {REQUESTS_PER_CLIENT} requests, real HTTP",
        )
        for mode in modes
    }
    tails: dict[str, list[str]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="cairn-bench-http-") as scratch:
        servers = {
            "batched": RetrievalProcess(name="batched", index=index, scratch=Path(scratch), env={"EMBED_MAX_QUERY_BATCH": "32", "SEARCH_MAX_QUERY_BATCH": "32"}),
            "unbatched": RetrievalProcess(name="unbatched", index=index, scratch=Path(scratch), env={"EMBED_MAX_QUERY_BATCH": "1", "SEARCH_MAX_QUERY_BATCH": "1"}),
        }
        try:
            for server in servers.values():
                server.start()
            for server in servers.values():
                log(f"http: retrieval process '{server.name}' ready in {server.wait_ready():.1f}s")
                for mode in modes:  # first searches build the BM25 matrix and warm the model
                    _single_client_ms(server, queries[:5], mode=mode)
            offset = 0
            for repeat in range(repeats):
                sample = queries[offset : offset + SINGLE_CLIENT_QUERIES]
                offset += SINGLE_CLIENT_QUERIES
                encode_ms = []
                for query in sample:
                    started = time.perf_counter()
                    bare.encode([query], batch_size=1, normalize_embeddings=True, show_progress_bar=False)
                    encode_ms.append((time.perf_counter() - started) * 1000)
                encode_p50 = statistics.median(encode_ms)
                line = [f"  repeat {repeat + 1}/{repeats}: bare encode p50 {encode_p50:.1f} ms"]
                for mode in modes:
                    p50 = statistics.median(_single_client_ms(servers["batched"], sample, mode=mode))
                    latency[mode].add(p50, encode_p50)
                    line.append(f"{mode} p50 {p50:.1f} ms")
                for mode in modes:
                    order = ["batched", "unbatched"] if repeat % 2 == 0 else ["unbatched", "batched"]
                    rates = {}
                    for name in order:
                        rate, samples = asyncio.run(_load(servers[name], queries, mode=mode))
                        rates[name] = rate
                        tails[mode].append(f"{name} p50 {percentile(samples, 50):.0f} / p95 {percentile(samples, 95):.0f} ms")
                    throughput[mode].add(rates["batched"], rates["unbatched"])
                    line.append(f"{mode} {rates['batched']:.0f} vs {rates['unbatched']:.0f} req/s")
                log(", ".join(line) + f" (load {load_average():.1f})")
        finally:
            for server in servers.values():
                server.stop()
    for mode in modes:
        throughput[mode].note += "; latency under load: " + "; ".join(tails[mode][-2:])
    return [*latency.values(), *throughput.values()]
