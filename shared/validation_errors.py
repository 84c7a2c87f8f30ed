"""A pydantic validation error said in one line, as every Cairn error message says it: `where: what`.

`history.0.question: must not contain NUL characters (U+0000)`, `QuerySubmitted.data.query: Field required`,
`CHAT_REQUESTS_PER_MINUTE: Input should be a valid integer`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def one_line(error: Mapping[str, Any]) -> str:
    """One error of `ValidationError.errors()` as `where: what`, or `what` alone where it has no location
    (a check across fields)."""
    where = location(error)
    message = message_of(error)
    return f"{where}: {message}" if where else message


def location(error: Mapping[str, Any]) -> str:
    """The error's location, dotted (`messages.1.content`), without the `body` FastAPI puts before a field of
    the request body."""
    loc = tuple(error.get("loc", ()))
    if loc[:1] == ("body",):
        loc = loc[1:]
    return ".".join(str(part) for part in loc)


def message_of(error: Mapping[str, Any]) -> str:
    if error.get("type") == "extra_forbidden":  # a field a request model does not declare
        return "unknown field"
    # pydantic words a validator's own message "Value error, ...": the message alone says it better.
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")
