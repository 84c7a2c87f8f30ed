"""Why the embedder holds numpy's BLAS pool to one thread: a query encode's p50 while numpy products
(an exact search over 20k vectors) run beside it, with BLAS at its default thread count and at one."""
from __future__ import annotations

import os
import statistics
import threading
import time

import numpy as np
from threadpoolctl import threadpool_limits

from bench.common import Figure, load_average

QUERIES_PER_BLOCK = 60


def _encode_p50(bare, queries: list[str]) -> float:
    samples = []
    for query in queries:
        started = time.perf_counter()
        bare.encode([query], batch_size=1, normalize_embeddings=True, show_progress_bar=False)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _with_numpy_beside(bare, queries: list[str], *, blas_threads: int) -> float:
    vectors = np.random.default_rng(0).standard_normal((20_000, 384), dtype=np.float32)
    batch = np.random.default_rng(1).standard_normal((384, 16), dtype=np.float32)
    stop = threading.Event()

    def exact_search() -> None:
        while not stop.is_set():
            vectors @ batch

    with threadpool_limits(limits=blas_threads, user_api="blas"):
        worker = threading.Thread(target=exact_search, daemon=True)
        worker.start()
        try:
            return _encode_p50(bare, queries)
        finally:
            stop.set()
            worker.join()


def run(*, bare, queries: list[str], repeats: int, log=print) -> list[Figure]:
    default_threads = os.cpu_count() or 1  # OpenBLAS's own default: one thread per core
    figure = Figure(
        name=f"query encode p50 beside numpy: BLAS {default_threads} threads (default) vs 1",
        unit="ms", kind="ratio", target=None, baseline_name="BLAS held to 1 thread",
        note="ratio > 1: the default BLAS pool slows the encode; the service holds it to 1",
    )
    idle = []
    for repeat in range(repeats):
        block = queries[repeat * QUERIES_PER_BLOCK : (repeat + 1) * QUERIES_PER_BLOCK]
        idle.append(_encode_p50(bare, block))
        unlimited = _with_numpy_beside(bare, block, blas_threads=default_threads)
        limited = _with_numpy_beside(bare, block, blas_threads=1)
        figure.add(unlimited, limited)
        log(f"  repeat {repeat + 1}/{repeats}: encode p50 alone {idle[-1]:.1f} ms, beside numpy with BLAS "
            f"{default_threads} threads {unlimited:.1f} ms, with 1 thread {limited:.1f} ms (load {load_average():.1f})")
    figure.note += f"; alone (no numpy): {statistics.median(idle):.1f} ms"
    return [figure]
