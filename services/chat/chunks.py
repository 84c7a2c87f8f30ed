"""The retrieved passage as the chat pipeline sees it, whatever the retrieval service's wire format."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RetrievedChunk:
    chunk_id: str
    doc_id: str
    content: str
    score: float
    relevance: float  # cosine similarity when retrieval reports one (dense_score), else its score
    title: str = ""
    section: str = ""
    url: str | None = None
    category: str | None = None
    page: int | None = None
    chunk_index: int | None = None

    @property
    def heading(self) -> str:
        """`Title > Section`, or whichever of the two is known."""
        parts = [p for p in (self.title, self.section) if p]
        if self.section and self.section == self.title:
            parts = [self.title]
        return " > ".join(parts) or self.doc_id
