"""The outside systems chat depends on, as Protocols, and the records they return.

Logic modules import only this; adapters/ implements it, main.py wires the concrete ones.
"""
from __future__ import annotations

from collections.abc import AsyncIterator
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


@dataclass(frozen=True)
class Exchange:
    """One finished turn of a conversation, as kept for follow-ups."""

    question: str  # what the user typed
    standalone: str  # the question as sent to retrieval (rewritten when it was a follow-up)
    answer: str
    # When the question came (epoch seconds): a conversation is read in this order, not in the order its
    # answers finished (two questions sent at once). 0 for turns kept before it was recorded.
    asked_at: float = 0.0


class Retriever(Protocol):
    """Searches the document collection.

    Raises shared.errors.DependencyUnavailable("retrieval") when the service is down, times out or
    fails, and shared.errors.BadRequest when it rejects the search (for example bad filters).
    """

    async def search(
        self, *, query: str, top_k: int, filters: dict[str, Any] | None, caller: Caller
    ) -> list[RetrievedChunk]:
        """Chunks ranked best first."""

    async def readiness(self) -> dict[str, bool]:
        """/readyz checks: `retrieval` (the service answers its health check), and, where the retriever can
        tell, `retrieval_service_token` (false when retrieval refuses chat's service token)."""


class Generator(Protocol):
    """A chat-completion model. Raises services.chat.errors.LLMUnavailable when it fails (after its retries)."""

    async def generate(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> Generation:
        """The complete answer to `messages`."""

    def stream(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> AsyncIterator[str | Generation]:
        """Text deltas as the model writes them, then one Generation with the whole text, usage and
        finish_reason. Closing the iterator early (a client that went away) cancels the request."""

    async def ping(self) -> bool:
        """True when the model endpoint answers."""


class ConversationStore(Protocol):
    """The recent turns of each conversation, owned by the user who started it.

    Raises services.chat.errors.ConversationNotFound when `conversation_id` belongs to another user,
    and shared.errors.DependencyUnavailable("conversation_store") when the store does not answer.
    """

    async def history(self, *, conversation_id: str, user_id: str) -> list[Exchange]:
        """The kept turns, oldest first; empty for a conversation not seen before."""

    async def append(self, *, conversation_id: str, user_id: str, exchange: Exchange) -> None:
        """Keep `exchange` as the newest turn (dropping the oldest past the limit) and renew the TTL."""

    async def ping(self) -> bool:
        """True when the store answers."""


class Reformulator(Protocol):
    """Rewrites a question into a standalone one (follow-ups resolved, typos fixed where it can)."""

    async def reformulate(self, *, query: str, history: list[Exchange], model: str) -> str:
        """The standalone question; `query` itself when nothing needs rewriting."""
