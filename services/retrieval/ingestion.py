"""Add, replace or skip a document: chunk, (optionally) situate, embed, store.

Re-ingesting identical content is a no-op; changed content replaces the old chunks. This module is the
single write path into the indexes: every index that must follow the documents hooks in at the store.
"""
from __future__ import annotations

import asyncio
import hashlib
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from services.retrieval import parsing
from services.retrieval.chunking import CHUNKER_VERSION, Chunk, chunk_text, document_title
from services.retrieval.document_metadata import document_fields
from services.retrieval.errors import UnprocessableDocument, WriteConflict
from services.retrieval.parsing.ligatures import written_out
from services.retrieval.ports import (
    CHUNK_COUNT_KEY,
    CONTEXT_KEY,
    Embedder,
    MetadataValue,
    StoredChunk,
    VectorStore,
    chunk_id_of,
    indexed_text,
    is_complete,
)
from shared.doc_ids import within_doc_id_limit

if TYPE_CHECKING:
    from services.retrieval.contextual import Contextualizer

Status = Literal["added", "unchanged", "replaced"]
MARKDOWN_SUFFIXES = {".md", ".markdown"}
# Model tokens kept free for a contextual prefix, so prefix + chunk still fit what the model embeds.
CONTEXT_TOKENS = 64
# How often a document written at the same time through another replica is written again (_settle).
_SETTLE_REWRITES = 3
_SETTLE_PAUSE_S = 0.05


@dataclass(frozen=True)
class NewDocument:
    """A document's text and fields. `markdown=None`: decided by the source's suffix (.txt = plain text).

    `page_starts`: where each page begins in `text` (PDFs); chunks then carry their 1-based page.
    `section_starts`: (offset, heading path) of sections not written as markdown headings (a PDF's outline).
    `code_blocks`: (start, end) of code blocks a parser wrote (an HTML page's <pre>), kept whole when they fit.
    """

    text: str
    doc_id: str | None = None
    title: str | None = None
    source: str | None = None
    url: str | None = None
    category: str | None = None
    markdown: bool | None = None
    page_starts: tuple[int, ...] = ()
    section_starts: tuple[tuple[int, str], ...] = ()
    code_blocks: tuple[tuple[int, int], ...] = ()
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)  # the user's own fields, checked


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
    return doc_id_of_path(document.source or "") or f"doc-{digest[:16]}"


def doc_id_of_path(path: str) -> str:
    """The doc_id a file path (a source, an upload's file name) gives: '/'-separated, without '.' and '..'
    segments, which clients resolve in a URL (GET /documents/../a.md asks for /a.md), so that a document under
    such an id could be neither read nor deleted; "" for a path of no names."""
    parts = [part for part in PurePosixPath(path.replace("\\", "/")).parts if part != ".."]
    return within_doc_id_limit(PurePosixPath(*parts).as_posix()) if parts and parts != ["/"] else ""


def is_markdown(source: str | None) -> bool:
    """Markdown unless the source names a plain-text file."""
    return source is None or PurePosixPath(source.replace("\\", "/")).suffix.lower() != ".txt"


def from_parsed(parsed: parsing.ParsedDocument, **fields: Any) -> NewDocument:
    """A NewDocument from parsed file content; `fields` (doc_id, title, source, url, category, metadata) win over
    parsed ones."""
    title = fields.pop("title", None) or parsed.title
    return NewDocument(
        text=parsed.text,
        title=title,
        markdown=parsed.markdown,
        page_starts=parsed.page_starts,
        section_starts=parsed.section_starts,
        code_blocks=parsed.code_blocks,
        **fields,
    )


def from_text(*, text: str, source: str | None = None, **fields: Any) -> NewDocument:
    """A NewDocument from text sent as JSON: HTML (by the source's suffix) is converted, anything else kept as is
    but for its ligatures, written out as the parsers write them. A leading byte-order mark is dropped, as the
    parsers drop a file's: left in, it hid a first `# Title` and made the text differ from the same file uploaded."""
    text = text.removeprefix("\ufeff")
    if source and parsing.format_of(source) == "html":
        return from_parsed(parsing.parse(source, text.encode("utf-8")), source=source, **fields)
    return NewDocument(text=written_out(text), source=source, **fields)


def _fallback_title(document: NewDocument, doc_id: str) -> str:
    name = document.source or doc_id
    return PurePosixPath(name.replace("\\", "/")).stem or doc_id


def _fit(prefix: str | None, *, budget: int, count_tokens: Callable[[str], int]) -> str | None:
    """The prefix, cut so that it has at most `budget` tokens: at a word, or at a character when not
    even its first word fits (Chinese and Japanese sentences hold no spaces)."""
    if not prefix or count_tokens(prefix) <= budget:
        return prefix
    words = prefix.split(" ")
    kept = _most_that_fit(len(words) - 1, lambda n: count_tokens(" ".join(words[:n])) <= budget)
    if kept:
        return " ".join(words[:kept])
    return prefix[: _most_that_fit(len(words[0]) - 1, lambda n: count_tokens(prefix[:n]) <= budget)] or None


def _most_that_fit(most: int, fits: Callable[[int], bool]) -> int:
    """The largest n in [0, most] with fits(n), for a `fits` that holds up to some n and not beyond."""
    low, high = 0, most
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _chunk_metadata(chunk: Chunk, prefix: str | None) -> dict[str, str | int]:
    meta: dict[str, str | int] = {
        "section": chunk.section,
        "chunk_index": chunk.chunk_index,
        "char_start": chunk.char_start,
        "char_end": chunk.char_end,
    }
    if chunk.page is not None:
        meta["page"] = chunk.page
    if prefix:
        meta[CONTEXT_KEY] = prefix
    return meta


class DocumentLocks:
    """A lock per doc_id being ingested or deleted. Two ingests of one document in this process then run one
    after the other, the second replacing the first; at once, both saw no document and their chunks mixed.
    A delete waits too: landing between an ingest's write and its keyword indexing, it left the keyword
    index holding the chunks Chroma no longer had."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._holders: Counter[str] = Counter()

    @asynccontextmanager
    async def hold(self, doc_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(doc_id, asyncio.Lock())
        self._holders[doc_id] += 1
        try:
            async with lock:
                yield
        finally:
            self._holders[doc_id] -= 1
            if not self._holders[doc_id]:
                del self._locks[doc_id], self._holders[doc_id]


_ingesting = DocumentLocks()


async def ingest_document(
    document: NewDocument,
    *,
    embedder: Embedder,
    store: VectorStore,
    chunk_size: int,
    chunk_overlap: int,
    contextualizer: Contextualizer | None = None,
) -> IngestResult:
    """Store `document` as embedded chunks with ids chunk_id_of(doc_id, chunk_index): "{doc_id}#{chunk_index}".

    With a `contextualizer`, each chunk is embedded (and keyword-indexed) with a model-written prefix
    situating it in the document; the stored content stays the chunk itself. Chunks are then cut
    CONTEXT_TOKENS shorter (at most a quarter of the model's limit) and prefixes cut to that many tokens,
    so that prefix and chunk are embedded whole. A chunk whose prefix could not be written is stored
    without one, and the document is then re-done on its next ingest.

    A changed document is replaced: its old chunks are deleted once the new ones are embedded, just
    before they are written, so searches miss the document only for the time of one store write. (Not
    upsert-then-trim: Chroma's upsert merges metadata, so a field the new version lacks would survive.)
    Ingests of one document in this process run one at a time (DocumentLocks); on a store other replicas
    share, the document is read back until one version of it stands whole (_settle), else WriteConflict.
    """
    if not document.text.strip():
        raise ValueError("document text is empty")
    digest = content_hash(document.text)
    doc_id = derive_doc_id(document, digest)
    async with _ingesting.hold(doc_id):
        return await _ingest(
            document, doc_id=doc_id, digest=digest, embedder=embedder, store=store, chunk_size=chunk_size,
            chunk_overlap=chunk_overlap, contextualizer=contextualizer,
        )


async def delete_document(doc_id: str, *, store: VectorStore) -> int:
    """Delete every chunk of `doc_id` once no ingest of it in this process is under way; how many there were."""
    async with _ingesting.hold(doc_id):
        return await store.delete(doc_id=doc_id)


def chunking_key(
    *, size: int, overlap: int, section_starts: tuple[tuple[int, str], ...], code_blocks: tuple[tuple[int, int], ...] = ()
) -> str:
    """How a document is cut into chunks, stored with it so that re-ingesting the same text after
    CHUNK_SIZE_TOKENS or CHUNK_OVERLAP_TOKENS changed (or a PDF's outline, an HTML page's code blocks, or the
    chunker) chunks it again."""
    key = f"{size} tokens, {overlap} overlap, chunker {CHUNKER_VERSION}"
    if section_starts:
        key += ", outline " + hashlib.sha256(repr(section_starts).encode()).hexdigest()[:12]
    if code_blocks:
        key += ", code " + hashlib.sha256(repr(code_blocks).encode()).hexdigest()[:12]
    return key


def _same_fields(stored: Mapping[str, MetadataValue], wanted: Mapping[str, MetadataValue]) -> bool:
    """Whether a document's stored fields are the wanted ones, a boolean equal only to a boolean: Python holds
    True == 1, which found `"reviewed": true` sent over a stored `"reviewed": 1` unchanged, while filters tell the
    two apart. A whole number and a float stay equal (1 == 1.0), as filters compare numbers."""
    return stored == wanted and all(isinstance(stored[key], bool) == isinstance(value, bool) for key, value in wanted.items())


async def _ingest(
    document: NewDocument, *, doc_id: str, digest: str, embedder: Embedder, store: VectorStore, chunk_size: int,
    chunk_overlap: int, contextualizer: Contextualizer | None,
) -> IngestResult:
    markdown = is_markdown(document.source) if document.markdown is None else document.markdown
    # One line: a title is shown as a heading and put in prompts, where a line break could pose as structure.
    given = " ".join((document.title or "").split())
    title = given or await asyncio.to_thread(
        document_title, document.text, fallback=_fallback_title(document, doc_id), markdown=markdown
    )
    reserve = min(CONTEXT_TOKENS, embedder.max_tokens // 4) if contextualizer is not None else 0
    size = min(chunk_size, embedder.max_tokens - reserve)
    overlap = min(chunk_overlap, size - 1)
    fields = {
        "title": title,
        "source": document.source,
        "url": document.url,
        "category": document.category,
        "content_hash": digest,
        "pages": len(document.page_starts) or None,
        "context_model": contextualizer.model_name if contextualizer else None,
        "chunking": chunking_key(
            size=size, overlap=overlap, section_starts=document.section_starts, code_blocks=document.code_blocks
        ),
    }
    wanted = {k: v for k, v in fields.items() if v is not None} | dict(document.metadata)

    existing = await store.get_document(doc_id)
    if (
        existing is not None and existing.complete  # complete: no write of it was cut short
        and existing.content_hashes == {digest} and _same_fields(existing.metadata, wanted)
    ):
        return IngestResult(doc_id=doc_id, title=title, status="unchanged", chunks=existing.chunks)

    chunks = await asyncio.to_thread(
        chunk_text,
        document.text,
        count_tokens=embedder.count_tokens,
        chunk_size=size,
        chunk_overlap=overlap,
        markdown=markdown,
        page_starts=document.page_starts,
        section_starts=document.section_starts,
        code_blocks=document.code_blocks,
    )
    if not chunks:  # markdown that is only front matter: nothing would be stored, yet "added"
        raise UnprocessableDocument(f"{doc_id}: no text to index after its front matter")
    prefixes: list[str | None] = [None] * len(chunks)
    if contextualizer is not None:
        written = await contextualizer.prefixes(document=document.text, chunks=[c.text for c in chunks])
        prefixes = await asyncio.to_thread(
            lambda: [_fit(p, budget=reserve, count_tokens=embedder.count_tokens) for p in written]
        )
        if not all(prefixes):
            # Not marked as situated, so the next ingest of this content tries the missing prefixes again.
            wanted.pop("context_model")
    metadatas = [
        wanted | _chunk_metadata(chunk, prefix) | {CHUNK_COUNT_KEY: len(chunks)}
        for chunk, prefix in zip(chunks, prefixes, strict=True)
    ]
    embeddings = await embedder.embed_documents(
        [indexed_text(chunk.text, meta) for chunk, meta in zip(chunks, metadatas, strict=True)]
    )
    stored = [
        StoredChunk(
            chunk_id=chunk_id_of(doc_id, chunk.chunk_index), doc_id=doc_id, content=chunk.text, embedding=embedding, metadata=meta
        )
        for chunk, meta, embedding in zip(chunks, metadatas, embeddings, strict=True)
    ]
    await _write(store, doc_id, stored, replace=existing is not None)
    if store.shared:
        await _settle(store, doc_id, stored)
    return IngestResult(doc_id=doc_id, title=title, status="added" if existing is None else "replaced", chunks=len(chunks))


async def _write(store: VectorStore, doc_id: str, chunks: list[StoredChunk], *, replace: bool) -> None:
    if replace:
        await store.delete(doc_id=doc_id)
    await store.upsert(chunks)
    if store.shared:
        # Another replica may have written a longer version of this document meanwhile (DocumentLocks holds
        # within one process only): what lies beyond this version goes, so the later write leaves no mix.
        await store.delete(doc_id=doc_id, from_chunk_index=len(chunks))


async def _settle(store: VectorStore, doc_id: str, chunks: list[StoredChunk]) -> None:
    """Read the document back and write it again until one version of it stands whole.

    Two replicas writing it at once interleave their upserts and trims: a shorter version's trim could cut
    the tail off a longer one written over it, and an upsert over the other's chunks keeps the fields
    those lack (Chroma merges metadata). Whoever finds such a mix writes its own version again, whole;
    a whole version of other content was written after this one and stands.
    """
    ours = {chunk.chunk_id: dict(chunk.metadata) for chunk in chunks}
    for rewrites in range(_SETTLE_REWRITES + 1):
        found = {chunk.chunk_id: chunk.metadata for chunk in await store.get_chunks(doc_ids=[doc_id])}
        if not found or found == ours or _one_version(found) and not _same_content(found, ours):
            return
        if rewrites == _SETTLE_REWRITES:
            break
        await asyncio.sleep(random.uniform(0, _SETTLE_PAUSE_S * (rewrites + 1)))  # two replicas at it: one goes first
        await _write(store, doc_id, chunks, replace=True)
    raise WriteConflict(doc_id)


def _one_version(found: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether stored chunks are all of one write: one content, one set of document fields, none missing."""
    fields = {tuple(sorted(document_fields(meta).items())) for meta in found.values()}
    return len(fields) == 1 and is_complete(list(found.values()))


def _same_content(found: Mapping[str, Mapping[str, Any]], ours: Mapping[str, Mapping[str, Any]]) -> bool:
    return {meta.get("content_hash") for meta in found.values()} == {meta.get("content_hash") for meta in ours.values()}
