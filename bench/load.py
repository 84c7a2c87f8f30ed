"""Closed-loop load: N concurrent clients, each sending its next request when the last one has ended,
for a fixed time (optionally paced, and capped in count); what came back and how long it took."""
from __future__ import annotations

import asyncio
import itertools
import math
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from bench.common import percentile

# Sends request number i; raises on a failed request (an error status, a refused connection, a timeout).
Call = Callable[[int], Awaitable[object]]
ERROR_SAMPLES = 5


@dataclass
class LoadResult:
    clients: int
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)  # of the requests that succeeded
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return len(self.latencies_ms) + self.errors

    @property
    def rate(self) -> float:
        """Successful requests per second of wall time (the in-flight tail after the deadline included)."""
        return len(self.latencies_ms) / self.seconds if self.seconds > 0 else 0.0

    def latency(self, q: float) -> float:
        return percentile(self.latencies_ms, q) if self.latencies_ms else math.nan

    def as_dict(self) -> dict[str, object]:
        return {
            "clients": self.clients, "seconds": round(self.seconds, 2), "requests": self.requests, "errors": self.errors,
            "rate": round(self.rate, 2), **{f"p{q}": round(self.latency(q), 1) for q in (50, 95, 99)},
            "error_samples": self.error_samples,
        }


async def run_load(
    call: Call, *, clients: int, duration_s: float, interval_s: float | None = None, max_requests: int | None = None
) -> LoadResult:
    """`clients` workers call `call(i)` (i counting up across all of them) until `duration_s` has passed
    or `max_requests` were sent; with `interval_s`, each worker starts a request at most every interval."""
    if clients < 1 or duration_s <= 0:
        raise ValueError("clients must be >= 1 and duration_s > 0")
    result = LoadResult(clients=clients, seconds=0.0)
    numbers = itertools.count()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + duration_s

    async def client() -> None:
        next_start = loop.time()
        while loop.time() < deadline:
            number = next(numbers)
            if max_requests is not None and number >= max_requests:
                return
            started = time.perf_counter()
            try:
                await call(number)
            except Exception as exc:  # noqa: BLE001 - every failure is counted, and a few kept to show
                result.errors += 1
                if len(result.error_samples) < ERROR_SAMPLES:
                    result.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                result.latencies_ms.append((time.perf_counter() - started) * 1000)
            if interval_s:
                next_start += interval_s
                await asyncio.sleep(max(0.0, next_start - loop.time()))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    result.seconds = time.perf_counter() - started
    return result


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline else math.nan


def median_of(results: list[LoadResult], metric: Callable[[LoadResult], float]) -> float:
    values = [metric(r) for r in results]
    return statistics.median(values) if values else math.nan
