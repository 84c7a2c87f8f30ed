"""What the services' metrics modules share: bucket sets and the timing of awaited calls.

Every Cairn metric is named `cairn_*` and carries only low-cardinality labels (a route template, a status,
a stage, a model id from the allow-list), never a user, a query or a document. The HTTP metrics live in
shared/web.py and the outbox's in shared/outbox.py, beside the code they count; each service's own are
in services/<name>/metrics.py. The streams' failures are counted here: chat and the gateway both count
them. docs/operations.md lists them all.
"""
from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar

from prometheus_client import Counter, Histogram

T = TypeVar("T")

# Pipeline steps: from a cached query encode (well under a millisecond) to a slow model answer.
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# Items per micro-batch: powers of two up to the largest batch any batcher allows.
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# A stream's request is counted with its 200 once the stream begins: what goes wrong later shows only here.
STREAM_FAILURES = Counter(
    "cairn_stream_failures_total",
    "Streamed answers that began (200 sent) and then ended in an error event or were cut off, by the error code",
    ["service", "route", "reason"],
)


def count_stream_failure(*, service: str, route: str, reason: str) -> None:
    """`reason`: the error code of the `error` event the stream ended with (or would have, when cut off)."""
    STREAM_FAILURES.labels(service, route, reason).inc()


async def timed(histogram: Histogram, awaitable: Awaitable[T]) -> T:
    """`await awaitable`, observing its duration in seconds on `histogram` (a labelled child), failed or not."""
    started = time.perf_counter()
    try:
        return await awaitable
    finally:
        histogram.observe(time.perf_counter() - started)
