"""BEIR documents as Cairn documents, and a store wrapper that remembers the embeddings written."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from services.retrieval.evaluation.beir import BeirDocument
from services.retrieval.ingestion import NewDocument
from services.retrieval.ports import StoredChunk, VectorStore

_WORD_END = re.compile(r"\S+")


def truncate_to_tokens(text: str, *, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The longest prefix ending at a word that has at most `max_tokens` tokens — what the model
    itself would read of `text`, give or take the word the model's own cut splits. When not even the
    first word fits (text without spaces, such as Chinese or Japanese), the cut falls inside it."""
    if count_tokens(text) <= max_tokens:
        return text
    ends = [match.end() for match in _WORD_END.finditer(text)]
    return (
        _longest_within(text, ends, max_tokens=max_tokens, count_tokens=count_tokens)
        or _longest_within(text, range(1, len(text)), max_tokens=max_tokens, count_tokens=count_tokens)
        or text[:1]
    )


def _longest_within(text: str, cuts: Sequence[int], *, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """text[:cut] for the largest of the ascending `cuts` that keeps it within `max_tokens`; "" if none does."""
    low, high = 0, len(cuts)  # how many of the cuts fit lies in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text[: cuts[middle - 1]]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text[: cuts[low - 1]] if low else ""


def as_new_document(document: BeirDocument, *, dataset: str) -> NewDocument:
    """Title and text joined by a space, as MTEB embeds BEIR documents; plain text (no markdown)."""
    text = f"{document.title} {document.text}" if document.title else document.text
    return NewDocument(text=text, doc_id=document.doc_id, title=document.title or document.doc_id, category=dataset, markdown=False)


class RecordingStore:
    """A VectorStore that passes every call through and keeps the embeddings written, so the
    approximate search can be checked against exact search over the same vectors."""

    def __init__(self, inner: VectorStore) -> None:
        self._inner = inner
        self.embeddings: dict[str, list[float]] = {}
        self._owner: dict[str, tuple[str, int]] = {}

    async def upsert(self, chunks: list[StoredChunk]) -> None:
        await self._inner.upsert(chunks)
        for chunk in chunks:
            self.embeddings[chunk.chunk_id] = chunk.embedding
            self._owner[chunk.chunk_id] = (chunk.doc_id, int(chunk.metadata.get("chunk_index", 0)))

    async def delete(self, *, doc_id: str, from_chunk_index: int = 0) -> int:
        deleted = await self._inner.delete(doc_id=doc_id, from_chunk_index=from_chunk_index)
        for chunk_id, (owner, index) in list(self._owner.items()):
            if owner == doc_id and index >= from_chunk_index:
                del self.embeddings[chunk_id], self._owner[chunk_id]
        return deleted

    def __getattr__(self, name: str) -> Any:
        # Everything else (query, get_document, what later versions of the protocol add) unchanged.
        return getattr(self._inner, name)
