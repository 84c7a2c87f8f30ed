"""Request-field types that take exactly what their JSON Schema says: no "3" or true for an integer,
no 0 or "yes" for a boolean, no "0.5" for a number (pydantic's lax mode would coerce all of these)."""
from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, StrictBool, StrictFloat

# Python's whitespace (str.isspace), spelled out so that the pattern means the same in every regex dialect.
_WHITESPACE = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
# A JSON Schema `pattern` (unanchored) for a string that str.strip() does not empty.
NOT_BLANK_PATTERN = f"[^{_WHITESPACE}]"
# Characters shown as nothing: Unicode's Default_Ignorable_Code_Point in the Basic Multilingual Plane (soft
# hyphen, zero-width spaces and joiners, direction marks, word joiner, variation selectors, byte-order mark,
# Hangul fillers). Those beyond it (tags, ...) are left out: a pattern cannot name them in every regex dialect.
_INVISIBLE = (
    "\\xad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u202a-\\u202e\\u2060-\\u206f"
    "\\u3164\\ufe00-\\ufe0f\\ufeff\\uffa0\\ufff0-\\ufff8"
)
# A JSON Schema `pattern` (unanchored) for a string with something to read: a character neither whitespace
# nor invisible.
VISIBLE_TEXT_PATTERN = f"[^{_WHITESPACE}{_INVISIBLE}]"
_VISIBLE = re.compile(VISIBLE_TEXT_PATTERN)


# What no text Cairn stores holds, named as its refusals name it. U+0000 in text is a binary or corrupted file read
# as text, or a stray escape; kept, it would not come back as sent: the chat service's citation pass takes it for a
# marker of its own (and drops it), and analytics stores it as U+FFFD since PostgreSQL's text columns refuse it (a
# doc_id holding it would be counted as cited under another id, a question holding it under another text).
NUL = "\x00"
NUL_CHARACTERS = "NUL characters (U+0000)"
# What without_nul checks, said in the schema for clients and schema-driven tests; a null or a list passes it,
# as the validator lets them through.
NO_NUL_SCHEMA = {"not": {"type": "string", "pattern": "\\x00"}}


def without_nul(value: str | None) -> str | None:
    """A field validator: the text refused if it holds U+0000, as an uploaded text file holding it is refused."""
    if value is not None and NUL in value:
        raise ValueError(f"must not contain {NUL_CHARACTERS}")
    return value


def is_blank(text: str) -> bool:
    """Whether `text` is only whitespace and invisible characters: a text of zero-width spaces looks empty and
    gives nothing to search, yet str.strip() keeps it."""
    return _VISIBLE.search(text) is None


def trimmed_text_pattern(max_chars: int) -> str:
    """A JSON Schema `pattern` for a string of 1..max_chars characters once str.strip() has trimmed it, not
    blank (is_blank): a question of zero-width spaces is as empty as one of spaces."""
    space, text = f"[{_WHITESPACE}]", NOT_BLANK_PATTERN
    # The lookahead passes the blank characters in front and finds a visible one; the rest counts the length.
    visible = f"(?=[{_WHITESPACE}{_INVISIBLE}]*{VISIBLE_TEXT_PATTERN})"
    return rf"^{visible}{space}*{text}(?:[\s\S]{{0,{max_chars - 2}}}{text})?{space}*$"


def _json_integer(value: Any) -> Any:
    """JSON integers, including 3.0 (an integer in JSON Schema), but not "3" or true, which int would coerce."""
    if isinstance(value, bool | str):
        raise ValueError("must be an integer")
    return value


# Last in `Annotated[int, Ge(1), Le(50), JSON_INTEGER]`: bounds placed after it would leave the schema's
# minimum / maximum out.
JSON_INTEGER = BeforeValidator(_json_integer)
JsonInt = Annotated[int, JSON_INTEGER]
JsonNumber = StrictFloat  # an integer or a float, not a string or a boolean
JsonBool = StrictBool
