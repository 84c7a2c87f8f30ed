"""Add, replace or skip a document: chunk, embed, store. Re-ingesting identical content is a no-op."""
from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from services.retrieval.chunking import chunk_text, document_title
from services.retrieval.ports import Embedder, StoredChunk, VectorStore

Status = Literal["added", "unchanged", "replaced"]
MARKDOWN_SUFFIXES = {".md", ".markdown"}


@dataclass(frozen=True)
class NewDocument:
    text: str
    doc_id: str | None = None
    title: str | None = None
    source: str | None = None
    url: str | None = None
    category: str | None = None


@dataclass(frozen=True)
class IngestResult:
    doc_id: str
    title: str
    status: Status
    chunks: int


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def derive_doc_id(document: NewDocument, digest: str) -> str:
    if document.doc_id:
        return document.doc_id
    if document.source:
        return PurePosixPath(document.source.replace("\\", "/")).as_posix()
    return f"doc-{digest[:16]}"


def is_markdown(source: str | None) -> bool:
    """Markdown unless the source names a plain-text file."""
    return source is None or PurePosixPath(source.replace("\\", "/")).suffix.lower() != ".txt"


def _fallback_title(document: NewDocument, doc_id: str) -> str:
    name = document.source or doc_id
    return PurePosixPath(name.replace("\\", "/")).stem or doc_id


async def ingest_document(
    document: NewDocument, *, embedder: Embedder, store: VectorStore, chunk_size: int, chunk_overlap: int
) -> IngestResult:
    """Store `document` as embedded chunks with ids f"{doc_id}#{chunk_index}".

    A changed document is replaced: new chunks are written first, then the old ones deleted, so
    searches never see the document missing.
    """
    if not document.text.strip():
        raise ValueError("document text is empty")
    digest = content_hash(document.text)
    doc_id = derive_doc_id(document, digest)
    markdown = is_markdown(document.source)
    title = document.title or document_title(document.text, fallback=_fallback_title(document, doc_id), markdown=markdown)
    fields = {"title": title, "source": document.source, "url": document.url, "category": document.category}
    wanted = {k: v for k, v in fields.items() if v is not None} | {"content_hash": digest}

    existing = await store.get_document(doc_id)
    if existing is not None and existing.content_hashes == {digest} and existing.metadata == wanted:
        return IngestResult(doc_id=doc_id, title=title, status="unchanged", chunks=existing.chunks)

    size = min(chunk_size, embedder.max_tokens)
    chunks = await asyncio.to_thread(
        chunk_text,
        document.text,
        count_tokens=embedder.count_tokens,
        chunk_size=size,
        chunk_overlap=min(chunk_overlap, size - 1),
        markdown=markdown,
    )
    embeddings = await embedder.embed_documents([chunk.text for chunk in chunks])
    await store.upsert(
        [
            StoredChunk(
                chunk_id=f"{doc_id}#{chunk.chunk_index}",
                doc_id=doc_id,
                content=chunk.text,
                embedding=embedding,
                metadata=wanted
                | {
                    "section": chunk.section,
                    "chunk_index": chunk.chunk_index,
                    "char_start": chunk.char_start,
                    "char_end": chunk.char_end,
                },
            )
            for chunk, embedding in zip(chunks, embeddings, strict=True)
        ]
    )
    if existing is not None:
        # Chunks with the same index were overwritten above; this drops the old version's surplus.
        await store.delete(doc_id=doc_id, from_chunk_index=len(chunks))
    return IngestResult(doc_id=doc_id, title=title, status="added" if existing is None else "replaced", chunks=len(chunks))
