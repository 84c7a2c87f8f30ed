"""Request and response bodies of the retrieval API."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator

from services.retrieval.document_metadata import MAX_FIELDS, MAX_TEXT_CHARS, RESERVED_KEYS, own_fields, user_metadata
from shared.filters import INT64_MAX, INT64_MIN, KEY_PATTERN, checked_filter, filter_schema
from services.retrieval.ingestion import doc_id_of_path
from services.retrieval.parsing.document import MAX_DOCUMENT_CHARS
from services.retrieval.ports import DOCUMENT_FIELDS, DocumentInfo
from shared import json_body
from shared.doc_ids import MAX_DOC_ID_CHARS, MAX_SOURCE_CHARS
from shared.json_types import (
    JSON_INTEGER,
    NO_NUL_SCHEMA,
    VISIBLE_TEXT_PATTERN,
    JsonBool,
    JsonNumber,
    is_blank,
    trimmed_text_pattern,
    without_nul,
)
from shared.request_model import RequestModel

MAX_QUERY_CHARS = 1000

_METADATA_DESCRIPTION = (
    "The document's own fields, stored on each of its chunks for filters and results: names of letters, digits "
    "and _ that Cairn does not use itself; values text, numbers or booleans; dates as seconds since 1970 (UTC)."
)
# What user_metadata accepts, as far as JSON Schema can say it. The values are checked by user_metadata,
# whose messages name the field (a union type's would not).
METADATA_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_FIELDS,
    "propertyNames": {"pattern": KEY_PATTERN, "not": {"enum": sorted(RESERVED_KEYS)}},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "maxLength": MAX_TEXT_CHARS, **NO_NUL_SCHEMA},
            {"type": "integer", "minimum": INT64_MIN, "maximum": INT64_MAX},
            {"type": "number", "not": {"type": "integer"}},
            {"type": "boolean"},
        ]
    },
}
MetadataIn = Annotated[dict[str, Any], WithJsonSchema(METADATA_SCHEMA)]


def _checked_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else user_metadata(value)


# What _without_line_break (and without_nul) check: "no line break" rather than a pattern anchored with $, which
# in Python also matches before a final line break.
OneLine = Annotated[str, Field(json_schema_extra={"not": {"pattern": "\n|\\x00"}})]
# A doc_id: on one line, without NUL, without the '.' and '..' segments _without_dot_segments refuses, and not
# ending in /similar (_not_naming_similar_documents).
DocId = Annotated[
    str,
    Field(json_schema_extra={"not": {"pattern": "\n|\\x00|" + r"(?:^|[/\\])\.{1,2}(?:[/\\]|$)|[/\\]similar$"}}),
]


def _without_line_break(value: str | None) -> str | None:
    """A doc_id (or the source it defaults to) holding a line break could be stored, but neither read nor
    deleted: the routes' path parameters, here and in the gateway, match anything but a line break."""
    if value is not None and "\n" in value:
        raise ValueError("must not contain a line break")
    return value


def _without_dot_segments(value: str | None) -> str | None:
    """A doc_id with a '.' or '..' segment could be stored, but neither read nor deleted: clients resolve those
    segments in a URL (GET /documents/a/../b.md asks for /documents/b.md). An id made from a source or file name
    leaves them out (ingestion.doc_id_of_path); one given is refused. A backslash counts as '/' there too, as
    browsers read it in a URL's path."""
    if value is not None and {".", ".."} & set(value.replace("\\", "/").split("/")):
        raise ValueError("must not hold a '.' or '..' segment (as in a/../b.md): clients resolve those in a URL, so "
                         "the document could be neither read nor deleted")
    return value


def names_similar_documents(doc_id: str) -> bool:
    """Whether a URL of `doc_id` would ask for the documents similar to another: GET /documents/{doc_id}/similar
    takes every path ending in /similar, so a document under such an id could be neither read nor deleted. A
    backslash counts as '/', as browsers read it in a URL's path."""
    return doc_id.replace("\\", "/").endswith("/similar")


_SIMILAR_REFUSAL = (
    "must not end in '/similar': a URL ending so asks for the documents similar to another one, so the document "
    "could be neither read nor deleted"
)


def _not_naming_similar_documents(value: str | None) -> str | None:
    if value is not None and names_similar_documents(value):
        raise ValueError(_SIMILAR_REFUSAL)
    return value


def _source_giving_an_addressable_id(value: str | None, info: ValidationInfo) -> str | None:
    """A source that would give the doc_id (none given) a URL cannot name is refused, as such a doc_id would be."""
    if value is None or "doc_id" not in info.data or info.data["doc_id"] is not None:
        return value
    derived = doc_id_of_path(value)
    if names_similar_documents(derived):
        raise ValueError(f"gives the doc_id {derived!r}, which {_SIMILAR_REFUSAL}; send a doc_id of your own")
    return value


def _metadata_form_field(text: str | None) -> dict[str, Any] | None:
    """The `metadata` form field of an upload: a JSON object, checked like DocumentIn.metadata."""
    if text is None:
        return None
    try:
        value = json_body.loads(text.encode("utf-8"))
    except ValueError as exc:
        raise ValueError(f"metadata must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("metadata must be a JSON object of fields")
    return user_metadata(value)


class DocumentIn(RequestModel):
    doc_id: DocId | None = Field(None, min_length=1, max_length=MAX_DOC_ID_CHARS, description="Stable id; default: source, else a content hash.")
    title: str | None = Field(None, max_length=500, description="Default (also for a blank one): the first '# ' heading, else the file stem.", json_schema_extra=NO_NUL_SCHEMA)
    text: str = Field(min_length=1, max_length=MAX_DOCUMENT_CHARS, json_schema_extra={"pattern": VISIBLE_TEXT_PATTERN, **NO_NUL_SCHEMA})
    source: OneLine | None = Field(None, min_length=1, max_length=MAX_SOURCE_CHARS, description="Path or name; a .txt suffix means plain text, else markdown.")
    url: str | None = Field(None, max_length=2000, json_schema_extra=NO_NUL_SCHEMA)
    category: str | None = Field(None, max_length=200, json_schema_extra=NO_NUL_SCHEMA)
    metadata: MetadataIn | None = Field(None, description=_METADATA_DESCRIPTION, examples=[{"team": "ops", "published": 1714521600}])

    _no_nul = field_validator("doc_id", "title", "text", "source", "url", "category")(without_nul)
    _valid_metadata = field_validator("metadata")(_checked_metadata)
    _valid_ids = field_validator("doc_id", "source")(_without_line_break)
    _addressable_id = field_validator("doc_id")(_without_dot_segments)
    _not_similar_route = field_validator("doc_id")(_not_naming_similar_documents)
    _addressable_derived_id = field_validator("source")(_source_giving_an_addressable_id)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if is_blank(value):
            raise ValueError("text must not be empty or only whitespace and invisible characters")
        return value


class DocumentOut(BaseModel):
    doc_id: str
    title: str
    status: Literal["added", "unchanged", "replaced"]
    chunks: int


class UploadFields(RequestModel):
    """The form fields that may accompany a `file` part in a multipart POST /documents."""

    doc_id: DocId | None = Field(None, min_length=1, max_length=MAX_DOC_ID_CHARS, description="Default: the file name.")
    title: str | None = Field(None, min_length=1, max_length=500, description="Default: from the file, else its stem.", json_schema_extra=NO_NUL_SCHEMA)
    source: OneLine | None = Field(None, min_length=1, max_length=MAX_SOURCE_CHARS, description="Default: the file name.")
    url: str | None = Field(None, max_length=2000, json_schema_extra=NO_NUL_SCHEMA)
    category: str | None = Field(None, max_length=200, json_schema_extra=NO_NUL_SCHEMA)
    metadata: Annotated[
        dict[str, Any] | None,
        BeforeValidator(_metadata_form_field),
        WithJsonSchema({"anyOf": [METADATA_SCHEMA, {"type": "null"}]}),
    ] = Field(None, description='A JSON object, such as {"team": "ops"}. ' + _METADATA_DESCRIPTION)

    _no_nul = field_validator("doc_id", "title", "source", "url", "category")(without_nul)
    _valid_ids = field_validator("doc_id", "source")(_without_line_break)
    _addressable_id = field_validator("doc_id")(_without_dot_segments)
    _not_similar_route = field_validator("doc_id")(_not_naming_similar_documents)


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
    chunking: str | None = Field(
        None, description="How the document was cut: chunk size and overlap in model tokens (and a PDF outline's digest)."
    )
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict, description="The document's own fields.")

    @classmethod
    def of(cls, document: DocumentInfo) -> DocumentSummary:
        built_in = {k: v for k, v in document.metadata.items() if k in DOCUMENT_FIELDS}
        return cls(doc_id=document.doc_id, chunks=document.chunks, **built_in, metadata=own_fields(document.metadata))


class DocumentList(BaseModel):
    documents: list[DocumentSummary] = Field(description="One page of the documents, in doc_id order.")
    total: int = Field(description="How many documents the collection holds, on every page.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the page after this one; null on the last page.")


class DeletedDocument(BaseModel):
    doc_id: str
    deleted_chunks: int


FILTERS_DESCRIPTION = (
    "Metadata conditions, all of which must hold: a value for equality, or an object of operators $eq $ne $in "
    "$nin $gt $gte $lt $lte. Range bounds are numbers, or ISO dates compared with fields stored as epoch seconds."
)
FILTERS_EXAMPLE = {"category": "guide", "doc_id": {"$in": ["a.md", "b.md"]}, "page": {"$gte": 2, "$lte": 5}}


def filters_query(sent: list[str] | None) -> dict[str, Any] | None:
    """The `filters` query parameter of GET /documents/{doc_id}/similar: the JSON object POST /search takes as
    `filters`, checked as it is there. Given twice it is refused: taking one would drop the other's conditions."""
    if not sent:
        return None
    if len(sent) > 1:
        raise ValueError("give filters once, as one JSON object holding every condition")
    try:
        value = json_body.loads(sent[0].encode("utf-8"))
    except ValueError as exc:
        raise ValueError(f"filters must be a JSON object: {exc}") from None
    return checked_filter(value)


class SearchRequest(RequestModel):
    query: str = Field(
        description=f"What to look for, 1..{MAX_QUERY_CHARS} characters once trimmed, not only invisible ones.",
        json_schema_extra={"pattern": trimmed_text_pattern(MAX_QUERY_CHARS), **NO_NUL_SCHEMA},
    )
    top_k: Annotated[int, Ge(1), Le(50), JSON_INTEGER] = 8
    threshold: Annotated[JsonNumber, Ge(-1.0), Le(1.0)] | None = Field(
        None,
        description="Minimum cosine similarity (dense_score) of a returned chunk, in every mode; "
        "in keyword mode setting it costs a query encode.",
    )
    mode: Literal["hybrid", "dense", "keyword"] = Field(
        "hybrid", description="hybrid: BM25 and dense fused by reciprocal rank; dense: cosine; keyword: BM25."
    )
    filters: Annotated[dict[str, Any], WithJsonSchema(filter_schema())] | None = Field(
        None, description=FILTERS_DESCRIPTION, examples=[FILTERS_EXAMPLE]
    )
    rerank: JsonBool | None = Field(
        None, description="Rerank with the cross-encoder; default: yes when RERANK_MODEL is set. true without one: 422."
    )

    @field_validator("query")
    @classmethod
    def _trimmed_query(cls, value: str) -> str:
        value = value.strip()
        if is_blank(value):  # zero-width spaces and the like: nothing to search for
            raise ValueError("query must not be empty or only whitespace and invisible characters")
        if len(value) > MAX_QUERY_CHARS:
            raise ValueError(f"query must be at most {MAX_QUERY_CHARS} characters once trimmed")
        return without_nul(value)

    _valid_filter = field_validator("filters")(checked_filter)


class ChunkMetadata(BaseModel):
    """The built-in fields of a chunk, then its document's own fields (DocumentIn.metadata), side by side."""

    model_config = ConfigDict(extra="allow")

    title: str | None = None
    section: str | None = None
    url: str | None = None
    category: str | None = None
    source: str | None = None
    chunk_index: int
    char_start: int
    char_end: int
    page: int | None = None

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> ChunkMetadata:
        """From a stored chunk's metadata, without the fields Cairn keeps for itself (content_hash...)."""
        return cls.model_validate({k: v for k, v in metadata.items() if k in _BUILT_IN or k not in RESERVED_KEYS})


# Read once: pydantic's model_fields is a property that is looked up anew on each call, once per key of each
# result's metadata. Building a ten-result search response took 98 us with it, 52 us without.
_BUILT_IN = frozenset(ChunkMetadata.model_fields)


class SearchResult(BaseModel):
    chunk_id: str
    doc_id: str
    content: str
    score: float = Field(description="dense: cosine similarity; keyword: BM25; hybrid: the fused reciprocal-rank score.")
    dense_score: float | None = Field(description="Cosine similarity to the query (always set in hybrid mode).")
    keyword_score: float | None = Field(description="BM25 score; null when the keyword leg did not return the chunk.")
    dense_rank: int | None = Field(None, description="1-based rank in the dense leg, if it returned the chunk.")
    keyword_rank: int | None = Field(None, description="1-based rank in the keyword leg, if it returned the chunk.")
    rerank_score: float | None = Field(None, description="Cross-encoder score when reranked; results are then in its order.")
    metadata: ChunkMetadata


class SearchResponse(BaseModel):
    query: str
    mode: str
    took_ms: float
    results: list[SearchResult]


class SimilarDocumentOut(BaseModel):
    doc_id: str
    score: float = Field(description="Cosine similarity of its best chunk to the mean embedding of the given document.")
    chunk_id: str = Field(description="That best chunk.")
    title: str | None = None
    source: str | None = None
    url: str | None = None
    category: str | None = None


class SimilarDocuments(BaseModel):
    doc_id: str
    results: list[SimilarDocumentOut]
