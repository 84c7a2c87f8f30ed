"""The limits of a document's id and source, and how a path too long for an id is shortened: the retrieval
service and `cairn ingest` (which may run where retrieval's parsers are not installed) give a file the same id."""
from __future__ import annotations

import hashlib

# A longer id is refused when given; one derived from a longer source is shortened (within_doc_id_limit).
MAX_DOC_ID_CHARS = 512
MAX_SOURCE_CHARS = 1000


def within_doc_id_limit(path: str) -> str:
    """The path, or for a path over MAX_DOC_ID_CHARS its start and a hash of the whole: still stable and unique."""
    if len(path) <= MAX_DOC_ID_CHARS:
        return path
    return f"{path[: MAX_DOC_ID_CHARS - 17]}~{hashlib.sha256(path.encode('utf-8')).hexdigest()[:16]}"
