"""The outside systems chat depends on, as Protocols, and the records they return.

Logic modules import only this; adapters/ implements it, main.py wires the concrete ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from services.chat.chunks import RetrievedChunk
from shared.caller import Caller


@dataclass(frozen=True)
class Generation:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None


class Retriever(Protocol):
    """Searches the document collection.

    Raises shared.errors.DependencyUnavailable("retrieval") when the service is down, times out or
    fails, and shared.errors.BadRequest when it rejects the search (for example bad filters).
    """

    async def search(
        self, *, query: str, top_k: int, filters: dict[str, Any] | None, caller: Caller
    ) -> list[RetrievedChunk]:
        """Chunks ranked best first."""

    async def ping(self) -> bool:
        """True when the service answers its health check."""


class Generator(Protocol):
    """A chat-completion model. Raises services.chat.errors.LLMUnavailable when it fails."""

    async def generate(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> Generation:
        """The complete answer to `messages`."""

    async def ping(self) -> bool:
        """True when the model endpoint answers."""
