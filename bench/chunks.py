"""The bench index's chunks in memory, for the work done in the bench process (the floor, the Haystack
pipeline): ids, documents, titles, the text that was embedded and keyword-indexed, and the vectors the
ingestion stored. Read from Chroma once and kept beside the index as chunks.npz."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.retrieval.ports import indexed_text
from services.retrieval.settings import Settings

SNAPSHOT = "chunks.npz"


@dataclass(frozen=True)
class Chunks:
    ids: list[str]
    doc_ids: list[str]
    titles: list[str]
    texts: list[str]  # what was embedded and keyword-indexed (contextual prefix, if any, then the content)
    vectors: np.ndarray  # float32, one normalised row per chunk

    def __len__(self) -> int:
        return len(self.ids)


def load_chunks(index: Path, settings: Settings) -> Chunks:
    """The chunks of the bench index at `index` (bench.index.ensure_index), from the snapshot beside it."""
    snapshot = index / SNAPSHOT
    if not snapshot.is_file():
        chunks = asyncio.run(_read_from_chroma(index, settings))
        np.savez(
            snapshot, ids=np.array(chunks.ids), doc_ids=np.array(chunks.doc_ids), titles=np.array(chunks.titles),
            texts=np.array(chunks.texts), vectors=chunks.vectors,
        )
    with np.load(snapshot) as data:
        return Chunks(
            ids=data["ids"].tolist(), doc_ids=data["doc_ids"].tolist(), titles=data["titles"].tolist(),
            texts=data["texts"].tolist(), vectors=np.ascontiguousarray(data["vectors"], dtype=np.float32),
        )


async def _read_from_chroma(index: Path, settings: Settings) -> Chunks:
    from bench.index import store_for

    store = store_for(settings, index)
    try:
        await store.open()
        stored = sorted(await store.get_chunks(with_embeddings=True), key=lambda c: c.chunk_id)
    finally:
        store.close()
    vectors = np.asarray([c.embedding for c in stored], dtype=np.float32)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return Chunks(
        ids=[c.chunk_id for c in stored],
        doc_ids=[c.doc_id for c in stored],
        titles=[str(c.metadata.get("title") or c.doc_id) for c in stored],
        texts=[indexed_text(c.content, c.metadata) for c in stored],
        vectors=vectors,
    )
