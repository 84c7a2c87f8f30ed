"""A document's own metadata: flat fields the user attaches at ingest (a team, a version, a date as
seconds since 1970), stored on every chunk, filtered on like the built-in fields, and shown with
search results and in the document listing.

Their names may not shadow a field Cairn writes itself (title, page, chunk_index...), and they must be
names a filter can use; values are what Chroma stores: text, finite numbers, whole numbers of 64 bits,
booleans.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from shared.filters import INT64_MAX, INT64_MIN, KEY_PATTERN
from shared.json_types import NUL, NUL_CHARACTERS
from services.retrieval.ports import CHUNK_COUNT_KEY, CONTEXT_KEY, DOCUMENT_FIELDS, MetadataValue

__all__ = ["MAX_FIELDS", "MAX_TEXT_CHARS", "RESERVED_KEYS", "document_fields", "own_fields", "user_metadata"]

MAX_FIELDS = 32
MAX_TEXT_CHARS = 1000
RESERVED_KEYS = frozenset(
    {
        *DOCUMENT_FIELDS, "doc_id", "section", "chunk_index", "char_start", "char_end", "page",
        CONTEXT_KEY, CHUNK_COUNT_KEY,
    }
)
_KEY = re.compile(KEY_PATTERN)


def user_metadata(raw: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """`raw` checked field by field; ValueError naming the first field that cannot be stored."""
    if len(raw) > MAX_FIELDS:
        raise ValueError(f"at most {MAX_FIELDS} metadata fields")
    for key, value in raw.items():
        _check_key(key)
        _check_value(key, value)
    return dict(raw)


def document_fields(chunk_metadata: Mapping[str, MetadataValue]) -> dict[str, MetadataValue]:
    """What a stored chunk says about its whole document: the built-in document fields and the user's."""
    return {key: value for key, value in chunk_metadata.items() if key in DOCUMENT_FIELDS or key not in RESERVED_KEYS}


def own_fields(metadata: Mapping[str, MetadataValue]) -> dict[str, MetadataValue]:
    """The user's fields among a stored chunk's or document's metadata."""
    return {key: value for key, value in metadata.items() if key not in RESERVED_KEYS}


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ValueError(f"metadata field {key!r} must be a plain field name (a letter or _, then letters, digits, _)")
    if key in RESERVED_KEYS:
        raise ValueError(f"metadata field {key!r} is set by Cairn; choose another name")


def _check_value(key: str, value: Any) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"metadata field {key!r}: whole numbers must fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"metadata field {key!r}: numbers must be finite")
    elif isinstance(value, str):
        if len(value) > MAX_TEXT_CHARS:
            raise ValueError(f"metadata field {key!r}: at most {MAX_TEXT_CHARS} characters")
        if NUL in value:
            raise ValueError(f"metadata field {key!r}: must not contain {NUL_CHARACTERS}")
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate from a JSON \ud800 escape
                raise ValueError(f"metadata field {key!r}: the text is not valid Unicode") from None
    else:
        raise ValueError(f"metadata field {key!r}: a value must be text, a number or a boolean, not {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return "a list" if isinstance(value, list | tuple) else "an object" if isinstance(value, Mapping) else type(value).__name__
