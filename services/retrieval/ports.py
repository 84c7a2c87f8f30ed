"""The two outside systems retrieval depends on, as Protocols, and the plain records they exchange.

Logic modules (chunking, ingestion, search) import only this; adapters/ implements it.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shared.filters import Filter

MetadataValue = str | int | float | bool

# Fields that describe a whole document: every chunk carries a copy, and a store returns them in
# DocumentInfo.metadata (get_document / list_documents).
DOCUMENT_FIELDS = ("title", "source", "url", "category", "content_hash", "pages", "context_model", "chunking")
# Chunk metadata holding how many chunks the document was cut into when this chunk was written: a document
# whose stored chunks fall short (a store lost between two write calls) is written again, not found unchanged.
CHUNK_COUNT_KEY = "chunk_count"
# Chunk metadata holding the model-written prefix that situates a chunk in its document (contextual chunking).
CONTEXT_KEY = "context"


def indexed_text(content: str, metadata: Mapping[str, object]) -> str:
    """What is embedded and keyword-indexed for a chunk: its contextual prefix, if any, then its content.

    The stored and returned `content` stays the chunk alone.
    """
    prefix = metadata.get(CONTEXT_KEY)
    return f"{prefix}\n\n{content}" if isinstance(prefix, str) and prefix else content


@dataclass(frozen=True)
class StoredChunk:
    chunk_id: str
    doc_id: str
    content: str
    embedding: Sequence[float]  # a list, or a numpy row as a store reads them back; empty when not read
    metadata: dict[str, MetadataValue]


@dataclass(frozen=True)
class ChunkHit:
    chunk_id: str
    doc_id: str
    content: str
    distance: float
    metadata: dict[str, MetadataValue]


@dataclass(frozen=True)
class KeywordHit:
    chunk_id: str
    doc_id: str
    content: str
    score: float  # BM25
    metadata: dict[str, MetadataValue]


@dataclass(frozen=True)
class DocumentInfo:
    doc_id: str
    chunks: int
    content_hashes: frozenset[str]
    metadata: dict[str, MetadataValue] = field(default_factory=dict)
    complete: bool = True  # every chunk its chunks say it was cut into is stored


def is_complete(chunk_metadatas: list[Mapping[str, object]]) -> bool:
    """Whether the stored chunks of one document are all it was written with (chunks written before their
    count was recorded are taken as complete)."""
    return all(m.get(CHUNK_COUNT_KEY, len(chunk_metadatas)) == len(chunk_metadatas) for m in chunk_metadatas)


@dataclass(frozen=True)
class DocumentPage:
    documents: list[DocumentInfo]
    total: int  # every stored document, not only this page's
    more: bool  # documents follow the last one of this page


def chunk_id_of(doc_id: str, chunk_index: int) -> str:
    return f"{doc_id}#{chunk_index}"


def doc_id_of(chunk_id: str) -> str:
    """The document a chunk id names (chunk_id_of's inverse; a doc_id may itself hold '#')."""
    return chunk_id.rpartition("#")[0] or chunk_id


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

    @property
    def shared(self) -> bool:
        """Whether other processes write this store too (retrieval replicas on one Chroma server)."""

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        """Insert or overwrite chunks by chunk_id."""

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        """Delete a document's chunks whose chunk_index >= from_chunk_index (default all); return how many."""

    async def query(
        self, *, embedding: list[float], top_k: int, where: Filter | Mapping[str, object] | None = None
    ) -> list[ChunkHit]:
        """The top_k nearest chunks (ascending cosine distance) that satisfy `where`.

        `where`: a shared.filters.Filter, or a filter as a request sends it (parsed here).
        """

    async def nearest(
        self, *, embedding: list[float], top_k: int, where: Filter | Mapping[str, object] | None = None
    ) -> list[tuple[str, float]]:
        """(chunk_id, cosine distance) of the top_k nearest chunks, like `query` but without content or
        metadata, which cost most of a query's time when many candidates are asked for."""

    async def get_chunks(
        self, *, ids: list[str] | None = None, doc_ids: list[str] | None = None, with_embeddings: bool = False
    ) -> list[StoredChunk]:
        """Stored chunks by chunk id or by document (neither: every chunk), in no set order.

        Without `with_embeddings` each chunk's embedding is an empty list.
        """

    async def changes(self, cursor: object | None) -> tuple[set[str] | None, object]:
        """Documents written by *other* writers (replicas) since `cursor`, and the cursor to pass next time.

        None instead of a set means "cannot tell, reload everything" (no cursor yet, or the index was
        recreated). Every upsert and delete is recorded for the other writers to see.
        """

    async def get_document(self, doc_id: str) -> DocumentInfo | None:
        """What is stored for one document, or None."""

    async def list_documents(self) -> list[DocumentInfo]:
        """Every stored document, ordered by doc_id."""

    async def document_page(self, *, after: str | None, limit: int) -> DocumentPage:
        """Up to `limit` documents whose doc_id sorts after `after` (None: from the first), ordered by doc_id.

        Chunk ids are chunk_id_of(doc_id, index), so a store can list doc_ids from ids alone and read the
        metadata of this page's chunks only.
        """

    async def heartbeat(self) -> bool:
        """True when the store answers."""


class ContextModel(Protocol):
    """A language model that writes the short prefix situating a chunk in its document."""

    @property
    def model_name(self) -> str:
        """The model's name; part of the prefix cache key."""

    async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
        """The model's answer to one prompt. Raises shared.errors.DependencyUnavailable("llm") when it fails."""


class PrefixCache(Protocol):
    """Prefixes already written, keyed by (model, the document's Contextualizer.cache_key, sha256 of the chunk)."""

    async def get_many(self, *, model: str, document_sha: str, chunk_shas: list[str]) -> dict[str, str]:
        """The cached prefix of each chunk hash that has one."""

    async def put_many(self, *, model: str, document_sha: str, prefixes: dict[str, str]) -> None:
        """Remember prefixes by chunk hash."""


class KeywordIndex(Protocol):
    """Chunks searchable by keyword (BM25), kept equal to what the VectorStore holds.

    Raises shared.errors.DependencyUnavailable("chroma") until it has been loaded from the store.
    """

    async def search(self, *, query: str, top_k: int, where: Filter | None = None) -> list[KeywordHit]:
        """Up to top_k chunks containing query terms, best BM25 score first, that satisfy `where`."""

    def held(self, chunk_ids: Iterable[str]) -> dict[str, StoredChunk]:
        """Those of `chunk_ids` the index holds, with content and metadata but no embedding. The index
        trails other replicas' writes by up to one sync interval; a chunk it lacks is read from the store."""


class Reranker(Protocol):
    """A cross-encoder that scores (query, passage) pairs; higher means more relevant."""

    async def score(self, *, query: str, passages: list[str]) -> list[float]:
        """One score per passage, in order."""
