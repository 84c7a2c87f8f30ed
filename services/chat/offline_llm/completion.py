"""What the offline generator answers to a list of chat messages: the extractive answer to the last user
message, written from the context blocks of the system messages, cut at the token limit. Tokens are
approximated by words, in the limit and in the usage alike."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from services.chat.context_format import parse_context
from services.chat.offline_llm import extractive


@dataclass(frozen=True)
class Reply:
    content: str
    finish_reason: Literal["stop", "length"]
    prompt_tokens: int
    completion_tokens: int


def words(text: str) -> int:
    return len(text.split())


def reply(messages: Iterable[tuple[str, str]], *, limit: int | None) -> Reply:
    """The answer to `messages`, given as (role, text) pairs; at most `limit` words when given."""
    messages = list(messages)
    system = "\n".join(text for role, text in messages if role in ("system", "developer"))
    question = next((text for role, text in reversed(messages) if role == "user"), "")
    content = extractive.answer(question, parse_context(system))
    finish: Literal["stop", "length"] = "stop"
    if limit is not None and words(content) > limit:
        content, finish = " ".join(content.split()[:limit]), "length"
    return Reply(content, finish, sum(words(text) for _, text in messages), words(content))
