"""Hand-written stand-ins for the embedding model and Chroma."""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import replace

from shared.filters import Filter, matches, parse_filter
from services.retrieval.document_metadata import document_fields
from services.retrieval.ports import ChunkHit, DocumentInfo, DocumentPage, StoredChunk, is_complete
from shared.errors import DependencyUnavailable

_WORD = re.compile(r"\w+")
DIMENSIONS = 64


def bag_of_words(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIMENSIONS] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class FakeEmbedder:
    """Words are tokens; vectors are hashed bags of words, so shared words mean similar vectors."""

    def __init__(self, max_tokens: int = 512) -> None:
        self.max_tokens = max_tokens
        self.embedded_texts: list[str] = []

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded_texts += texts
        return [bag_of_words(t) for t in texts]

    async def embed_query(self, text: str) -> list[float]:
        return bag_of_words(text)

    def count_tokens(self, text: str) -> int:
        return len(text.split())


class FakeStore:
    """An in-memory VectorStore; set `available = False` to play a Chroma that does not answer.

    `FakeStore(shared_with=other)` plays a second replica on the same index: same chunks, same change feed.
    """

    def __init__(self, *, shared_with: FakeStore | None = None) -> None:
        self.chunks: dict[str, StoredChunk] = shared_with.chunks if shared_with else {}
        self.change_log: list[tuple[int, set[str]]] = shared_with.change_log if shared_with else []
        self.available = True
        self.writer = id(self)
        self.shared = shared_with is not None  # as a Chroma server is: other replicas may write too

    async def changes(self, cursor: object | None) -> tuple[set[str] | None, object]:
        self._check()
        if not isinstance(cursor, int):
            return None, len(self.change_log)
        changed = {doc for writer, docs in self.change_log[cursor:] if writer != self.writer for doc in docs}
        return changed, len(self.change_log)

    async def get_chunks(
        self, *, ids: list[str] | None = None, doc_ids: list[str] | None = None, with_embeddings: bool = False
    ) -> list[StoredChunk]:
        self._check()
        everything = ids is None and doc_ids is None
        return [
            replace(c, metadata=dict(c.metadata), embedding=list(c.embedding) if with_embeddings else [])
            for c in self.chunks.values()
            if everything or c.chunk_id in (ids or ()) or c.doc_id in (doc_ids or ())
        ]

    def _check(self) -> None:
        if not self.available:
            raise DependencyUnavailable("chroma")

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        self._check()
        for chunk in chunks:
            if (old := self.chunks.get(chunk.chunk_id)) is not None:
                # As Chroma does: upserting an existing id merges the new metadata into the old.
                chunk = replace(chunk, metadata=old.metadata | chunk.metadata)
            self.chunks[chunk.chunk_id] = chunk
        self.change_log.append((self.writer, {chunk.doc_id for chunk in chunks}))

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        self._check()
        doomed = [
            cid for cid, c in self.chunks.items() if c.doc_id == doc_id and int(c.metadata["chunk_index"]) >= from_chunk_index
        ]
        for cid in doomed:
            del self.chunks[cid]
        if doomed:
            self.change_log.append((self.writer, {doc_id}))
        return len(doomed)

    async def query(self, *, embedding: list[float], top_k: int, where: Filter | dict | None = None) -> list[ChunkHit]:
        self._check()
        condition = parse_filter(where)
        hits = [
            ChunkHit(c.chunk_id, c.doc_id, c.content, 1.0 - sum(a * b for a, b in zip(embedding, c.embedding)), dict(c.metadata))
            for c in self.chunks.values()
            if matches(condition, c.metadata | {"doc_id": c.doc_id})
        ]
        return sorted(hits, key=lambda h: h.distance)[:top_k]

    async def nearest(self, *, embedding: list[float], top_k: int, where: Filter | dict | None = None) -> list[tuple[str, float]]:
        return [(hit.chunk_id, hit.distance) for hit in await self.query(embedding=embedding, top_k=top_k, where=where)]

    async def get_document(self, doc_id: str) -> DocumentInfo | None:
        return next((d for d in await self.list_documents() if d.doc_id == doc_id), None)

    async def list_documents(self) -> list[DocumentInfo]:
        self._check()
        by_doc: dict[str, list[StoredChunk]] = {}
        for chunk in self.chunks.values():
            by_doc.setdefault(chunk.doc_id, []).append(chunk)
        documents = []
        for doc_id in sorted(by_doc):
            first = min(by_doc[doc_id], key=lambda c: c.metadata["chunk_index"])
            documents.append(
                DocumentInfo(
                    doc_id=doc_id,
                    chunks=len(by_doc[doc_id]),
                    content_hashes=frozenset(str(c.metadata["content_hash"]) for c in by_doc[doc_id]),
                    metadata=document_fields(first.metadata),
                    complete=is_complete([c.metadata for c in by_doc[doc_id]]),
                )
            )
        return documents

    async def document_page(self, *, after: str | None, limit: int) -> DocumentPage:
        documents = await self.list_documents()
        following = [d for d in documents if after is None or d.doc_id > after]
        return DocumentPage(documents=following[:limit], total=len(documents), more=len(following) > limit)

    async def heartbeat(self) -> bool:
        return self.available
