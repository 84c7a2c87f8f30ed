"""What one HTTP hop costs with each client the services could use, under 32 concurrent callers.

Measured: a trivial FastAPI endpoint (POST /echo, a small JSON body back) served by uvicorn in its own
process, as the services are served; this process runs 32 callers in one event loop for a fixed time,
sharing one pooled client, first through an httpx.AsyncClient, then through an aiohttp.ClientSession (the
order alternates from one repeat to the next). Figures: requests/s and per-request latency p50/p95/p99,
each the median over the repeats; the ratio is aiohttp's requests/s over httpx's in the same repeat.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx

from bench.common import Figure, percentile
from bench.processes import free_port

CALLERS = 32
WARM_UP_S = 1.0
MEASURE_S = 3.0
BODY = {"query": "How do I add a user?", "top_k": 8, "filters": {"category": "guide"}}

Call = Callable[[], Awaitable[None]]


def _serve(port: int) -> None:
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/echo")
    async def echo(body: dict) -> dict:
        return {"results": [], "query": body.get("query")}

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _wait_ready(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the echo endpoint at {url} did not start")


async def _load(call: Call) -> tuple[float, list[float]]:
    """(requests/s, latencies in ms) of CALLERS callers looping on `call` for MEASURE_S after a warm-up."""
    latencies: list[float] = []
    start = time.perf_counter()
    measure_from, stop_at = start + WARM_UP_S, start + WARM_UP_S + MEASURE_S

    async def caller() -> None:
        while (now := time.perf_counter()) < stop_at:
            await call()
            if now >= measure_from:
                latencies.append((time.perf_counter() - now) * 1000)

    await asyncio.gather(*(caller() for _ in range(CALLERS)))
    return len(latencies) / MEASURE_S, latencies


async def _with_httpx(url: str) -> tuple[float, list[float]]:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:

        async def call() -> None:
            response = await client.post("/echo", json=BODY)
            response.raise_for_status()
            response.json()

        return await _load(call)


async def _with_aiohttp(url: str) -> tuple[float, list[float]]:
    connector = aiohttp.TCPConnector(limit=100)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def call() -> None:
            async with session.post("/echo", json=BODY) as response:
                response.raise_for_status()
                await response.json()

        return await _load(call)


def run(*, repeats: int, log=print) -> list[Figure]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,), daemon=True)
    server.start()
    rates = Figure(
        name=f"hop req/s, aiohttp client ({CALLERS} callers)", unit="req/s", kind="ratio", target=None,
        baseline_name="httpx AsyncClient",
    )
    tails = {
        q: Figure(name=f"hop p{q}, aiohttp client", unit="ms", kind="excess", target=None, baseline_name="httpx")
        for q in (50, 95, 99)
    }
    try:
        _wait_ready(url)
        for repeat in range(repeats):
            runs = [("httpx", _with_httpx), ("aiohttp", _with_aiohttp)]
            measured = {name: asyncio.run(client(url)) for name, client in (runs if repeat % 2 == 0 else runs[::-1])}
            (h_rate, h_lat), (a_rate, a_lat) = measured["httpx"], measured["aiohttp"]
            rates.add(a_rate, h_rate)
            for q, figure in tails.items():
                figure.add(percentile(a_lat, q), percentile(h_lat, q))
            log(
                f"hops: repeat {repeat + 1}/{repeats}: httpx {h_rate:.0f} req/s (p50/p95/p99 "
                f"{_tail(h_lat)} ms), aiohttp {a_rate:.0f} req/s ({_tail(a_lat)} ms)"
            )
    finally:
        server.terminate()
        server.join(10)
    rates.note = (
        f"httpx median {statistics.median(rates.baselines):.0f} req/s, aiohttp {statistics.median(rates.values):.0f} "
        f"req/s; one uvicorn process serving a trivial POST, {CALLERS} callers sharing one pooled client, "
        f"{MEASURE_S:g}s measured after {WARM_UP_S:g}s of warm-up"
    )
    return [rates, *tails.values()]


def _tail(latencies: list[float]) -> str:
    return "/".join(f"{percentile(latencies, q):.1f}" for q in (50, 95, 99))
