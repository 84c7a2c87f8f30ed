"""The prompt templates chat sends to the model, each with one slot that chat fills in."""
from __future__ import annotations

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
