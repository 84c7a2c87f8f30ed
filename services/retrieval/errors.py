"""Retrieval's own error types; shared.web maps every ServiceError to a JSON response."""
from __future__ import annotations

from shared.errors import ServiceError


class UnsupportedMediaType(ServiceError):
    """The file is of a type Cairn cannot read."""

    status_code = 415
    code = "unsupported_media_type"


class UnprocessableDocument(ServiceError):
    """The file has a supported type but is corrupt, empty, or holds no text."""

    status_code = 422
    code = "unprocessable_document"


class PayloadTooLarge(ServiceError):
    status_code = 413
    code = "payload_too_large"
