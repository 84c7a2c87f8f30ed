"""Request and response bodies of the retrieval API."""
from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints, field_validator

FilterValue = str | int | float | bool
_FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ErrorBody(BaseModel):
    error: str
    message: str


class DocumentIn(BaseModel):
    doc_id: str | None = Field(None, min_length=1, max_length=512, description="Stable id; default: source, else a content hash.")
    title: str | None = Field(None, min_length=1, max_length=500, description="Default: the first '# ' heading, else the file stem.")
    text: str = Field(min_length=1, max_length=10_000_000)
    source: str | None = Field(None, min_length=1, max_length=1000, description="Path or name; a .txt suffix means plain text, else markdown.")
    url: str | None = Field(None, max_length=2000)
    category: str | None = Field(None, max_length=200)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("text must not be empty or only whitespace")
        return value


class DocumentOut(BaseModel):
    doc_id: str
    title: str
    status: Literal["added", "unchanged", "replaced"]
    chunks: int


class UploadFields(BaseModel):
    """The form fields that may accompany a `file` part in a multipart POST /documents."""

    doc_id: str | None = Field(None, min_length=1, max_length=512, description="Default: the file name.")
    title: str | None = Field(None, min_length=1, max_length=500, description="Default: from the file, else its stem.")
    source: str | None = Field(None, min_length=1, max_length=1000, description="Default: the file name.")
    url: str | None = Field(None, max_length=2000)
    category: str | None = Field(None, max_length=200)


class DocumentSummary(BaseModel):
    doc_id: str
    title: str | None = None
    source: str | None = None
    url: str | None = None
    category: str | None = None
    chunks: int
    content_hash: str | None = Field(None, description="SHA-256 of the document's text (as extracted, for files).")
    pages: int | None = Field(None, description="Pages of a PDF.")
    context_model: str | None = Field(None, description="Model that wrote the chunks' contextual prefixes, if any.")


class DocumentList(BaseModel):
    documents: list[DocumentSummary]


class DeletedDocument(BaseModel):
    doc_id: str
    deleted_chunks: int


class SearchRequest(BaseModel):
    query: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000)]
    top_k: int = Field(8, ge=1, le=50)
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="Minimum cosine similarity.")
    mode: Literal["dense"] = "dense"
    filters: dict[str, FilterValue] | None = Field(
        None, max_length=10, description="Exact-match metadata filters, e.g. {\"category\": \"guide\"}."
    )

    @field_validator("filters")
    @classmethod
    def _plain_keys(cls, value: dict[str, FilterValue] | None) -> dict[str, FilterValue] | None:
        for key in value or {}:
            if not _FILTER_KEY.match(key):
                raise ValueError(f"filter key {key!r} must be a plain field name")
        return value


class ChunkMetadata(BaseModel):
    title: str | None = None
    section: str | None = None
    url: str | None = None
    category: str | None = None
    source: str | None = None
    chunk_index: int
    char_start: int
    char_end: int
    page: int | None = None


class SearchResult(BaseModel):
    chunk_id: str
    doc_id: str
    content: str
    score: float
    dense_score: float | None
    keyword_score: float | None
    metadata: ChunkMetadata


class SearchResponse(BaseModel):
    query: str
    mode: str
    took_ms: float
    results: list[SearchResult]
