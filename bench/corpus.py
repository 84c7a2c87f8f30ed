"""The SciFact corpus as Cairn documents, the real ingestion path, and its chunk sizes for the bench."""
from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.retrieval.evaluation.beir import load_beir
from services.retrieval.evaluation.corpus import as_new_document
from services.retrieval.ingestion import NewDocument, ingest_document
from services.retrieval.ports import Embedder, VectorStore

# About 500 characters of SciFact text per chunk: the chunk the speed figures are quoted for,
# and SciFact's 5,183 abstracts become about 20k chunks.
CHUNK_TOKENS = 128
CHUNK_OVERLAP = 16
CONCURRENT_DOCUMENTS = 32  # enough documents in flight to fill encode batches of 64 chunks


def documents(dataset_dir: Path, *, limit: int | None = None) -> list[NewDocument]:
    dataset = load_beir(dataset_dir, split="test")
    docs = [as_new_document(doc, dataset=dataset.name) for doc in dataset.corpus.values()]
    return docs[:limit] if limit else docs


def queries(dataset_dir: Path) -> list[str]:
    """Every query of the set (train and test): distinct texts, so no cache can answer them."""
    path = next(p for p in (dataset_dir / "queries.jsonl", dataset_dir / "queries.jsonl.gz") if p.is_file())
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        texts = [json.loads(line)["text"] for line in lines if line.strip()]
    return list(dict.fromkeys(texts))


class RecordingEmbedder:
    """Passes through; keeps the document texts it was asked to embed (for the bare-encode baseline)."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.texts: list[str] = []

    @property
    def max_tokens(self) -> int:
        return self._inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self._inner.count_tokens(text)

    async def embed_query(self, text: str) -> list[float]:
        return await self._inner.embed_query(text)

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return await self._inner.embed_documents(texts)


@dataclass
class Ingested:
    documents: int = 0
    chunks: int = 0
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


async def ingest_all(
    docs: list[NewDocument],
    *,
    embedder: Embedder,
    store: VectorStore,
    concurrency: int = CONCURRENT_DOCUMENTS,
    progress: Callable[[int], object] | None = None,
) -> Ingested:
    """Every document through services.retrieval.ingestion, `concurrency` at a time."""
    limit = asyncio.Semaphore(concurrency)
    report = Ingested()

    async def one(document: NewDocument) -> None:
        async with limit:
            result = await ingest_document(
                document, embedder=embedder, store=store, chunk_size=CHUNK_TOKENS, chunk_overlap=CHUNK_OVERLAP
            )
        report.documents += 1
        report.chunks += result.chunks
        report.statuses[result.status] = report.statuses.get(result.status, 0) + 1
        if progress:
            progress(1)

    started = time.perf_counter()
    await asyncio.gather(*(one(d) for d in docs))
    report.seconds = time.perf_counter() - started
    return report
