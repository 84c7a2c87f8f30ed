"""Pages of GET /documents: how many per page, and the cursor that says where the next page starts.

A cursor is the last doc_id of a page, base64url-encoded so that clients treat it as opaque. Pages
follow doc_id order, so a cursor stays valid when documents are added or deleted meanwhile, its own
document included: the next page starts at the first doc_id after it.
"""
from __future__ import annotations

import base64
import re

from services.retrieval.ports import DocumentPage

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# Unpadded base64url: what the API's schema accepts is exactly what doc_id_after reads.
CURSOR_PATTERN = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$"


def cursor_after(doc_id: str) -> str:
    return base64.urlsafe_b64encode(doc_id.encode("utf-8")).decode("ascii").rstrip("=")


def next_cursor(page: DocumentPage) -> str | None:
    """Where the page after this one starts; None for the last page."""
    return cursor_after(page.documents[-1].doc_id) if page.more and page.documents else None


def doc_id_after(cursor: str | None) -> str | None:
    """The doc_id a cursor holds; ValueError for one that does not match CURSOR_PATTERN. An altered cursor
    that matches it is still a place in doc_id order, so it is read: bytes that are not UTF-8 as escapes."""
    if cursor is None:
        return None
    if not re.fullmatch(CURSOR_PATTERN, cursor):
        raise ValueError("not a next_cursor of this list (unpadded base64url)")
    padded = cursor + "=" * (-len(cursor) % 4)
    return base64.b64decode(padded, altchars=b"-_", validate=True).decode("utf-8", "surrogateescape")
