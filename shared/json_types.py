"""Request-field types that take exactly what their JSON Schema says: no "3" or true for an integer,
no 0 or "yes" for a boolean, no "0.5" for a number (pydantic's lax mode would coerce all of these)."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, StrictBool, StrictFloat

# Python's whitespace (str.isspace), spelled out so that the pattern means the same in every regex dialect.
_WHITESPACE = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
# A JSON Schema `pattern` (unanchored) for a string that str.strip() does not empty.
NOT_BLANK_PATTERN = f"[^{_WHITESPACE}]"


def trimmed_text_pattern(max_chars: int) -> str:
    """A JSON Schema `pattern` for a string of 1..max_chars characters once str.strip() has trimmed it."""
    space, text = f"[{_WHITESPACE}]", NOT_BLANK_PATTERN
    return rf"^{space}*{text}(?:[\s\S]{{0,{max_chars - 2}}}{text})?{space}*$"


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
