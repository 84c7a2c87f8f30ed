"""Retrieval's own error types; shared.web maps every ServiceError to a JSON response."""
from __future__ import annotations

from shared.errors import RETRY_AFTER_S, ServiceError, StartRefused


class UnsupportedMediaType(ServiceError):
    """The file is of a type Cairn cannot read."""

    status_code = 415
    code = "unsupported_media_type"


class UnprocessableDocument(ServiceError):
    """The file has a supported type but is corrupt, empty, or holds no text."""

    status_code = 422
    code = "unprocessable_document"


class WriteConflict(ServiceError):
    """Another replica kept writing the same document over this ingest. A 503 with Retry-After rather than a
    409: nothing is wrong with the request, and sent again once the other write has settled, it succeeds
    (`cairn ingest` sends it again by itself). Not chroma_unavailable: Chroma answered every call."""

    status_code = 503
    code = "ingest_conflict"

    def __init__(self, doc_id: str) -> None:
        super().__init__(f"another ingest of {doc_id!r} kept writing over this one; send it again")

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(RETRY_AFTER_S)}


class PayloadTooLarge(ServiceError):
    status_code = 413
    code = "payload_too_large"


class EmbeddingModelMismatch(StartRefused):
    """The collection holds vectors of another embedding model than the configured one: Chroma would refuse
    every query vector of another length, and rank nonsense with one of the same length."""

    def __init__(self, *, collection: str, model: str, built_with: str | None, dimension: int | None) -> None:
        built = ", ".join(
            part for part in (built_with, f"{dimension}-dimensional vectors" if dimension else None) if part
        )
        super().__init__(
            f"EMBEDDING_MODEL_PATH, CHROMA_COLLECTION: the collection {collection!r} was built with another "
            f"embedding model ({built or 'not recorded'}) than EMBEDDING_MODEL_PATH holds ({model}); ingest the "
            "documents again into a new CHROMA_COLLECTION, or set EMBEDDING_MODEL_PATH back to the model it was built with"
        )
