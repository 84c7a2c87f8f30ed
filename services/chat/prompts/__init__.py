"""The prompt templates chat sends to the model, each with one slot that chat fills in."""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_FOLDER = Path(__file__).parent


@cache
def read_template(name: str, *, slot: str) -> str:
    """The text of prompts/`name`, checked once to hold `slot`."""
    path = _FOLDER / name
    text = path.read_text(encoding="utf-8")
    if slot not in text:
        raise ValueError(f"{path} has no {slot} slot")
    return text


@cache
def _tag_of(name: str) -> re.Pattern[str]:
    return re.compile(rf"<(\s*/?\s*{re.escape(name)}\s*)>", re.IGNORECASE)


def fenced(text: str, *, tag: str) -> str:
    """`text` made safe to put between <tag> and </tag>: a copy of either tag inside it ("</context>" in a
    document, written to end the passages early) has its angle brackets escaped, so it can close nothing."""
    return _tag_of(tag).sub(r"&lt;\1&gt;", text)
