"""The chat contract of DESIGN.md: `POST /chat` request and response bodies."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

MAX_QUERY_CHARS = 1000


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: str = Field(description=f"The question, 1..{MAX_QUERY_CHARS} characters once trimmed.")
    top_k: StrictInt | None = Field(None, ge=1, le=50, description="Passages to retrieve; default DEFAULT_TOP_K (8).")
    model_id: str | None = Field(None, min_length=1, max_length=200, description="A model from the allow-list.")
    conversation_id: str | None = Field(None, min_length=1, max_length=128)
    filters: dict[str, Any] | None = Field(None, description="Metadata filters passed to retrieval.")

    @field_validator("query")
    @classmethod
    def _trimmed_query(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("query must not be empty")
        if len(value) > MAX_QUERY_CHARS:
            raise ValueError(f"query must be at most {MAX_QUERY_CHARS} characters")
        return value


class Citation(BaseModel):
    number: int
    doc_id: str
    chunk_id: str
    title: str
    section: str
    page: int | None = None
    url: str | None = None
    snippet: str


class Source(Citation):
    """A cited passage in full."""

    content: str
    score: float


class RelatedDoc(BaseModel):
    """A relevant document that the answer does not cite."""

    doc_id: str
    title: str
    url: str | None = None
    score: float


class ConfidenceOut(BaseModel):
    level: Literal["High", "Medium", "Low"]
    score: float
    reason: str


class Timings(BaseModel):
    reformulate: float = 0.0
    retrieval: float = 0.0
    generation: float = 0.0
    citations: float = 0.0
    total: float = 0.0


class UsageOut(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class Metadata(BaseModel):
    request_id: str | None
    model: str | None = Field(description="null when no passage was relevant and the model was not asked.")
    reformulated_query: str
    chunks_retrieved: int
    chunks_used: int
    timings_ms: Timings
    usage: UsageOut
    finish_reason: str | None


class ChatResponse(BaseModel):
    query: str
    answer: str
    citations: list[Citation]
    sources: list[Source]
    related_docs: list[RelatedDoc]
    confidence: ConfidenceOut
    metadata: Metadata
