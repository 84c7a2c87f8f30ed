"""The chat contract of DESIGN.md: `POST /chat` request and response bodies."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, Field, WithJsonSchema, field_validator

from shared.filters import checked_filter, filter_schema
from shared.json_types import JSON_INTEGER, NO_NUL_SCHEMA, is_blank, trimmed_text_pattern, without_nul
from shared.request_model import RequestModel

MAX_QUERY_CHARS = 1000


class PastTurn(RequestModel):
    """A question asked earlier in the conversation and the answer it got."""

    question: str = Field(min_length=1, max_length=4 * MAX_QUERY_CHARS, json_schema_extra=NO_NUL_SCHEMA)
    answer: str = Field(max_length=20_000, json_schema_extra=NO_NUL_SCHEMA)

    # Refused here, where the caller is told which turn: the rewritten question would carry it into retrieval.
    _no_nul = field_validator("question", "answer")(without_nul)


class ChatRequest(RequestModel):
    query: str = Field(
        description=f"The question, 1..{MAX_QUERY_CHARS} characters once trimmed, not only invisible ones.",
        # The same rule as the validator below, for clients and schema-driven tests.
        json_schema_extra={"pattern": trimmed_text_pattern(MAX_QUERY_CHARS), **NO_NUL_SCHEMA},
    )
    top_k: Annotated[int, Ge(1), Le(50), JSON_INTEGER] | None = Field(
        None, description="Passages to retrieve; default DEFAULT_TOP_K (8)."
    )
    model_id: str | None = Field(None, min_length=1, max_length=200, description="A model from the allow-list.")
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="Continue this conversation (from an earlier response); omitted: a new one is started.",
    )
    filters: Annotated[dict[str, Any], WithJsonSchema(filter_schema())] | None = Field(
        None, description="Metadata filters passed to retrieval, checked here first (see POST /search of retrieval)."
    )
    history: list[PastTurn] | None = Field(
        None,
        max_length=50,
        description="Earlier turns, oldest first, for a caller that keeps the conversation itself (as OpenAI "
        "clients do); follow-ups are resolved against them. Ignored when conversation_id is given.",
    )

    # Refused before any work: a follow-up is rewritten by a model call before retrieval would refuse it.
    _valid_filters = field_validator("filters")(checked_filter)

    @field_validator("query")
    @classmethod
    def _trimmed_query(cls, value: str) -> str:
        value = value.strip()  # as retrieval trims it (any Unicode whitespace), which the pattern says too
        if is_blank(value):  # zero-width spaces and the like: nothing to search for, as retrieval would say
            raise ValueError("query must not be empty or only whitespace and invisible characters")
        if len(value) > MAX_QUERY_CHARS:
            raise ValueError(f"query must be at most {MAX_QUERY_CHARS} characters")
        return without_nul(value)  # analytics would keep another question than the one asked


class Support(BaseModel):
    """How well the answer's sentences that cite this passage are backed by it."""

    verdict: Literal["supported", "weak", "unsupported"]
    score: float = Field(description="0..1; see docs/asking-questions.md for how it is measured.")


class Citation(BaseModel):
    n: int = Field(description="The number the answer text uses, [n]; consecutive from 1 in order of first use.")
    doc_id: str
    chunk_id: str
    title: str
    section: str
    page: int | None = None
    url: str | None = None
    snippet: str = Field(description="The start of the passage, at most 200 characters.")
    content: str = Field(description="The passage in full, as the model was given it.")
    chunk_ids: list[str] = Field(
        default_factory=list,
        description="Every passage cited under this number, chunk_id first: the passages of one document page "
        "that the answer cites share one number.",
    )
    support: Support | None = None


class Source(Citation):
    """A cited document, once per URL (doc_id without one): its first cited passage, in full."""

    score: float


class RelatedDoc(BaseModel):
    """A document retrieval returned for the question, cited or not, best first."""

    doc_id: str
    title: str
    url: str | None = None
    category: str | None = None
    score: float
    cited: bool


class GroundingOut(BaseModel):
    """How much of the answer its cited passages back."""

    score: float = Field(description="0..1: the mean over cited sentences, a supported one counting 1, a weak one 0.5.")
    supported: int = Field(description="Citations whose every citing sentence the passage supports.")
    weak: int
    unsupported: int
    method: str = Field(description="How support is measured.")


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
    kind: Literal["answer", "no_information", "small_talk"] = Field(
        description="answer: cited from the documents; no_information: nothing relevant or the answer was rejected; "
        "small_talk: a greeting answered without searching."
    )
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
    conversation_id: str = Field(description="Send it back with the next question to ask a follow-up.")
    new_conversation: bool = Field(
        description="true when the question was answered as the first of its conversation: the request sent no "
        "conversation_id, or one Cairn keeps no turn of (expired after CONVERSATION_TTL_S, or never used)."
    )
    citations: list[Citation]
    sources: list[Source]
    related_docs: list[RelatedDoc]
    confidence: ConfidenceOut
    grounding: GroundingOut | None = Field(description="null when the model was not asked.")
    metadata: Metadata


class StreamSources(BaseModel):
    """The first event of /chat/stream: the passages given to the model, numbered as its tokens cite them."""

    sources: list[Citation]


class ModelsOut(BaseModel):
    default: str = Field(description="The model used when a request names none.")
    models: list[str] = Field(description="Every model a request may name as model_id.")
