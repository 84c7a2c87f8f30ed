"""The two outside systems retrieval depends on, as Protocols, and the plain records they exchange.

Logic modules (chunking, ingestion, search) import only this; adapters/ implements it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

MetadataValue = str | int | float | bool


@dataclass(frozen=True)
class StoredChunk:
    chunk_id: str
    doc_id: str
    content: str
    embedding: list[float]
    metadata: dict[str, MetadataValue]


@dataclass(frozen=True)
class ChunkHit:
    chunk_id: str
    doc_id: str
    content: str
    distance: float
    metadata: dict[str, MetadataValue]


@dataclass(frozen=True)
class DocumentInfo:
    doc_id: str
    chunks: int
    content_hashes: frozenset[str]
    metadata: dict[str, MetadataValue] = field(default_factory=dict)


class Embedder(Protocol):
    """Turns text into unit-length vectors; counts tokens the way the model does."""

    @property
    def max_tokens(self) -> int:
        """Longest input (without special tokens) the model embeds without truncation."""

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One normalised vector per text, in order; batched."""

    async def embed_query(self, text: str) -> list[float]:
        """The normalised vector of one query (may be cached)."""

    def count_tokens(self, text: str) -> int:
        """Model tokens in `text`, special tokens excluded. Safe to call from any thread."""


class VectorStore(Protocol):
    """Chunks with embeddings and flat metadata, searchable by cosine distance.

    Every method raises shared.errors.DependencyUnavailable("chroma") when the store does not answer.
    """

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        """Insert or overwrite chunks by chunk_id."""

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        """Delete a document's chunks whose chunk_index >= from_chunk_index (default all); return how many."""

    async def query(
        self, *, embedding: list[float], top_k: int, where: dict[str, MetadataValue] | None = None
    ) -> list[ChunkHit]:
        """The top_k nearest chunks (ascending cosine distance) matching every `where` key exactly."""

    async def get_document(self, doc_id: str) -> DocumentInfo | None:
        """What is stored for one document, or None."""

    async def list_documents(self) -> list[DocumentInfo]:
        """Every stored document, ordered by doc_id."""

    async def heartbeat(self) -> bool:
        """True when the store answers."""
