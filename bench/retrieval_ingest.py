"""Ingest throughput through the real path (chunk, embed, Chroma upsert, BM25 index) with each
embedding backend, against a bare sentence-transformers encode of the same chunks (same batch size,
same threads) measured in the same repeat."""
from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Figure, load_average
from bench.corpus import CONCURRENT_DOCUMENTS, RecordingEmbedder, documents, ingest_all
from bench.index import store_for
from services.retrieval.adapters.bm25_index import keyword_indexed
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.adapters.onnx_embedder import OnnxEmbedder
from services.retrieval.encoding import BatchingEmbedder
from services.retrieval.settings import Settings


async def _ingest_once(docs, *, embedder: BatchingEmbedder, settings: Settings, scratch: Path) -> tuple[int, float, list[str]]:
    chroma = store_for(settings, Path(tempfile.mkdtemp(dir=scratch)))
    try:
        await chroma.open()
        store, _, sync = keyword_indexed(chroma)
        await sync.refresh()
        recording = RecordingEmbedder(embedder)
        report = await ingest_all(docs, embedder=recording, store=store)
    finally:
        chroma.close()  # else each repeat's index stays in memory
    if report.statuses.get("added") != len(docs):
        raise RuntimeError(f"expected every document added, got {report.statuses}")
    return report.chunks, report.seconds, recording.texts


def run(*, settings: Settings, dataset_dir: Path, bare, repeats: int, sample: int, log=print) -> list[Figure]:
    """`bare`: a loaded SentenceTransformer, the baseline."""
    docs = documents(dataset_dir, limit=sample)
    options = {"threads": settings.torch_threads, "batch_size": settings.embed_batch_size, "cache_size": 0}
    started = time.perf_counter()
    backends: dict[str, BatchingEmbedder] = {
        "torch": SentenceTransformerEmbedder(settings.model_path(), **options),
        "onnx-int8": OnnxEmbedder(settings.model_path(), models_dir=settings.models_dir, **options),
    }
    log(f"ingest: {len(docs)} SciFact documents, {CONCURRENT_DOCUMENTS} in flight; models loaded in "
        f"{time.perf_counter() - started:.1f}s (onnx export included on a first run)")
    figures = {
        name: Figure(
            name=f"ingest chunks/s, {name}",
            unit="chunks/s",
            kind="ratio",
            target={"torch": 0.85, "onnx-int8": 1.4}[name],
            baseline_name="bare torch encode",
            note="chunk + embed + Chroma upsert + BM25, in-process, no HTTP",
        )
        for name in backends
    }
    warm = ["warm up the model and its thread pools"] * 8
    bare.encode(warm, batch_size=settings.embed_batch_size)
    for embedder in backends.values():
        embedder.encoder.encode(warm)
    try:
        with tempfile.TemporaryDirectory(prefix="cairn-bench-ingest-") as scratch:
            for repeat in range(repeats):
                order = list(backends) if repeat % 2 == 0 else list(reversed(backends))  # drift hits both alike
                rates: dict[str, float] = {}
                texts: list[str] = []
                for name in order:
                    chunks, seconds, texts = asyncio.run(
                        _ingest_once(docs, embedder=backends[name], settings=settings, scratch=Path(scratch))
                    )
                    rates[name] = chunks / seconds
                bare_started = time.perf_counter()
                bare.encode(texts, batch_size=settings.embed_batch_size, normalize_embeddings=True, show_progress_bar=False)
                bare_rate = len(texts) / (time.perf_counter() - bare_started)
                for name, rate in rates.items():
                    figures[name].add(rate, bare_rate)
                log(f"  repeat {repeat + 1}/{repeats}: bare {bare_rate:.1f}/s, "
                    + ", ".join(f"{n} {r:.1f}/s" for n, r in rates.items())
                    + f" ({len(texts)} chunks; load {load_average():.1f})")
    finally:
        for embedder in backends.values():
            embedder.close()
    return list(figures.values())


if __name__ == "__main__":
    from sentence_transformers import SentenceTransformer

    from bench.common import format_table, scifact_dir

    settings = Settings()
    bare_model = SentenceTransformer(str(settings.model_path()), device="cpu")
    print(format_table(run(settings=settings, dataset_dir=scifact_dir(None), bare=bare_model, repeats=int(sys.argv[1]) if len(sys.argv) > 1 else 1, sample=40)))
