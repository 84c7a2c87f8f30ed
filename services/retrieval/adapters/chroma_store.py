"""Chroma behind the VectorStore protocol: embedded (PersistentClient) or server (HttpClient).

We always pass our own embeddings; Chroma's default embedding function would download a model.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import httpx
from chromadb.errors import ChromaError

from services.retrieval.ports import ChunkHit, DocumentInfo, MetadataValue, StoredChunk, VectorStore
from shared.errors import DependencyUnavailable

__all__ = ["ChromaStore", "VectorStore", "to_where"]

log = logging.getLogger("cairn.retrieval.chroma")
T = TypeVar("T")

# Fields that describe the whole document; every chunk carries a copy.
DOCUMENT_FIELDS = ("title", "source", "url", "category", "content_hash")
_PAGE = 5000
_FAILURES = (ChromaError, httpx.HTTPError, OSError, TimeoutError)


def to_where(filters: dict[str, Any]) -> dict[str, Any] | None:
    """A Chroma `where` clause requiring every key to equal its value."""
    clauses = [{key: value} for key, value in filters.items()]
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class ChromaStore:
    def __init__(
        self, *, collection: str, path: Path | None = None, url: str | None = None, timeout_s: float = 10.0
    ) -> None:
        if (path is None) == (url is None):
            raise ValueError("give exactly one of path (embedded) or url (server)")
        self._name = collection
        self._path = path
        self._url = url
        self._timeout_s = timeout_s
        self._client: Any = None
        self._collection: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        with self._lock:
            return self._connect_locked()

    def _connect_locked(self) -> Any:
        import chromadb
        from chromadb.config import Settings as ChromaSettings

        no_telemetry = ChromaSettings(anonymized_telemetry=False)
        if self._client is None:
            if self._url is not None:
                parsed = urlparse(self._url)
                self._client = chromadb.HttpClient(
                    host=parsed.hostname or "127.0.0.1",
                    port=parsed.port or (443 if parsed.scheme == "https" else 8000),
                    ssl=parsed.scheme == "https",
                    settings=no_telemetry,
                )
            else:
                self._path.mkdir(parents=True, exist_ok=True)
                self._client = chromadb.PersistentClient(path=str(self._path), settings=no_telemetry)
        if self._collection is None:
            self._collection = self._client.get_or_create_collection(
                self._name, configuration={"hnsw": {"space": "cosine"}}, embedding_function=None
            )
        return self._collection

    async def _run(self, operation: Callable[[Any], T]) -> T:
        def call() -> T:
            try:
                return operation(self._connect())
            except ValueError as exc:
                if self._client is None:  # HttpClient raises ValueError when the server does not answer
                    raise ConnectionError(str(exc)) from exc
                raise

        try:
            return await asyncio.wait_for(asyncio.to_thread(call), self._timeout_s)
        except _FAILURES as exc:
            # Reopen next time: the server may have restarted, the collection may have been recreated.
            self._collection = None
            if self._url is not None:
                self._client = None
            log.warning("chroma call failed", extra={"error": type(exc).__name__, "detail": str(exc)[:200]})
            raise DependencyUnavailable("chroma") from exc

    async def open(self) -> None:
        """Connect now; failures surface later as 503s and readiness false, not as a crash."""
        try:
            await self._run(lambda collection: collection)
        except DependencyUnavailable:
            pass

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        if not chunks:
            return
        await self._run(
            lambda c: c.upsert(
                ids=[chunk.chunk_id for chunk in chunks],
                embeddings=[chunk.embedding for chunk in chunks],
                documents=[chunk.content for chunk in chunks],
                metadatas=[_clean(chunk.metadata) | {"doc_id": chunk.doc_id} for chunk in chunks],
            )
        )

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        where: dict[str, Any] = {"doc_id": doc_id}
        if from_chunk_index > 0:
            where = {"$and": [where, {"chunk_index": {"$gte": from_chunk_index}}]}
        result = await self._run(lambda c: c.delete(where=where))
        return int((result or {}).get("deleted", 0))

    async def query(
        self, *, embedding: list[float], top_k: int, where: dict[str, MetadataValue] | None = None
    ) -> list[ChunkHit]:
        if top_k < 1:
            raise ValueError("top_k must be >= 1")
        result = await self._run(
            lambda c: c.query(
                query_embeddings=[embedding],
                n_results=top_k,
                where=to_where(where or {}),
                include=["documents", "metadatas", "distances"],
            )
        )
        return [
            ChunkHit(chunk_id=cid, doc_id=str(meta.get("doc_id", "")), content=doc or "", distance=float(dist), metadata=dict(meta))
            for cid, doc, meta, dist in zip(
                result["ids"][0], result["documents"][0], result["metadatas"][0], result["distances"][0]
            )
        ]

    async def get_document(self, doc_id: str) -> DocumentInfo | None:
        result = await self._run(lambda c: c.get(where={"doc_id": doc_id}, include=["metadatas"]))
        documents = _group(result["metadatas"])
        return documents[0] if documents else None

    async def list_documents(self) -> list[DocumentInfo]:
        metadatas: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await self._run(lambda c: c.get(include=["metadatas"], limit=_PAGE, offset=offset))
            metadatas += page["metadatas"]
            if len(page["ids"]) < _PAGE:
                break
            offset += _PAGE
        return _group(metadatas)

    async def heartbeat(self) -> bool:
        try:
            await self._run(lambda c: self._client.heartbeat())
            return True
        except DependencyUnavailable:
            return False


def _clean(metadata: dict[str, Any]) -> dict[str, MetadataValue]:
    # Chroma accepts only str/int/float/bool values.
    return {key: value for key, value in metadata.items() if value is not None}


def _group(metadatas: list[dict[str, Any]]) -> list[DocumentInfo]:
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for meta in metadatas:
        by_doc.setdefault(str(meta.get("doc_id", "")), []).append(meta)
    documents = []
    for doc_id in sorted(by_doc):
        chunks = sorted(by_doc[doc_id], key=lambda m: m.get("chunk_index", 0))
        documents.append(
            DocumentInfo(
                doc_id=doc_id,
                chunks=len(chunks),
                content_hashes=frozenset(str(m.get("content_hash", "")) for m in chunks),
                metadata={k: chunks[0][k] for k in DOCUMENT_FIELDS if k in chunks[0]},
            )
        )
    return documents
