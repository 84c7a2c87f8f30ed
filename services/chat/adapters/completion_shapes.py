"""Whether what the openai SDK returned has the shape generation reads.

The SDK builds its models from any JSON without checking it (`construct`), so a body of another shape
becomes a ChatCompletion whose fields are None or of any type; and a body that is not JSON comes back as
text. These check the fields the generator reads, so such an answer is named as what it is.
"""
from __future__ import annotations

from typing import TypeGuard

from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta


def is_completion(value: object) -> TypeGuard[ChatCompletion]:
    return (
        isinstance(value, ChatCompletion) and isinstance(value.model, str | None) and isinstance(value.choices, list)
        and all(
            isinstance(choice, Choice) and isinstance(choice.finish_reason, str | None)
            and (choice.message is None or _is_message(choice.message))  # some servers send no message: no text
            for choice in value.choices
        )
    )


def is_chunk(value: object) -> TypeGuard[ChatCompletionChunk]:
    return (
        isinstance(value, ChatCompletionChunk) and isinstance(value.model, str | None)
        and isinstance(value.choices, list)
        and all(
            isinstance(choice, ChunkChoice) and isinstance(choice.finish_reason, str | None)
            and (choice.delta is None or _is_delta(choice.delta))  # some servers end without a delta
            for choice in value.choices
        )
    )


def _is_message(message: object) -> bool:
    return isinstance(message, ChatCompletionMessage) and isinstance(message.content, str | None)


def _is_delta(delta: object) -> bool:
    return isinstance(delta, ChoiceDelta) and isinstance(delta.content, str | None)


def token_counts(usage: object) -> tuple[int, int]:
    """Prompt and completion tokens; 0 for a count the server left out or sent as something else."""
    prompt, completion = getattr(usage, "prompt_tokens", 0), getattr(usage, "completion_tokens", 0)
    return (prompt if isinstance(prompt, int) else 0), (completion if isinstance(completion, int) else 0)
