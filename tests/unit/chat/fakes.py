"""Hand-written stand-ins for chat's outside systems."""
from __future__ import annotations

from typing import Any

from services.chat.chunks import RetrievedChunk
from services.chat.errors import ConversationNotFound
from services.chat.ports import Exchange, Generation
from shared.caller import Caller
from shared.events import Event


def make_chunk(
    n: int, content: str, *, score: float = 0.6, doc_id: str | None = None, title: str | None = None,
    section: str = "Intro", page: int | None = None,
) -> RetrievedChunk:
    return RetrievedChunk(
        chunk_id=f"chunk-{n}",
        doc_id=doc_id or f"doc-{n}",
        content=content,
        score=score,
        relevance=score,
        title=title or f"Doc {n}",
        section=section,
        url=f"docs/doc-{n}.md",
        page=page,
        chunk_index=0,
    )


GUIDE = [
    make_chunk(
        1,
        "## Adding users\nTo add a user, run `cairn user add NAME --role user`. "
        "The command prompts for the password. Scripts pass it with --password-stdin.",
        score=0.71,
        title="Users and roles",
        section="Adding users",
    ),
    make_chunk(
        2,
        "Redis keeps the login sessions. RabbitMQ carries the events to analytics.",
        score=0.42,
        title="Operations",
        section="Services",
    ),
    make_chunk(3, "The weather in the mountains changes quickly.", score=0.1, title="Unrelated", section="Misc"),
]


class FakeRetriever:
    def __init__(self, chunks: list[RetrievedChunk] | None = None, *, error: Exception | None = None) -> None:
        self.chunks = list(GUIDE if chunks is None else chunks)
        self.error = error
        self.calls: list[dict[str, Any]] = []
        self.healthy = True

    async def search(self, *, query: str, top_k: int, filters: dict[str, Any] | None, caller: Caller):
        self.calls.append({"query": query, "top_k": top_k, "filters": filters, "caller": caller})
        if self.error:
            raise self.error
        return self.chunks[:top_k]

    async def readiness(self) -> dict[str, bool]:
        return {"retrieval": self.healthy}


class RecordingGenerator:
    """Answers with a fixed text and records every call."""

    def __init__(
        self, text: str = "Run the command [1].", *, error: Exception | None = None, finish_reason: str = "stop"
    ) -> None:
        self.text = text
        self.error = error
        self.finish_reason = finish_reason
        self.calls: list[dict[str, Any]] = []

    async def generate(self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int):
        self.calls.append({"model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens})
        if self.error:
            raise self.error
        return Generation(
            text=self.text, model=model, prompt_tokens=100, completion_tokens=7, finish_reason=self.finish_reason
        )

    async def stream(self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int):
        """The text word by word, then the Generation; fails after the first word when `error` is set."""
        self.calls.append({"model": model, "messages": messages, "stream": True})
        words = self.text.split(" ")
        for n, word in enumerate(words):
            if self.error and n == 1:
                raise self.error
            yield word if n == 0 else " " + word
        yield Generation(text=self.text, model=model, prompt_tokens=100, completion_tokens=len(words), finish_reason="stop")

    async def ping(self) -> bool:
        return True


class MemoryConversations:
    """Conversations kept in a dict, with the ownership rule of the Redis store."""

    def __init__(self) -> None:
        self.turns: dict[str, list[Exchange]] = {}
        self.owners: dict[str, str] = {}
        self.healthy = True

    async def history(self, *, conversation_id: str, user_id: str) -> list[Exchange]:
        if self.owners.get(conversation_id, user_id) != user_id:
            raise ConversationNotFound(conversation_id)
        return sorted(self.turns.get(conversation_id, []), key=lambda exchange: exchange.asked_at)

    async def append(self, *, conversation_id: str, user_id: str, exchange: Exchange) -> None:
        if self.owners.setdefault(conversation_id, user_id) != user_id:
            raise ConversationNotFound(conversation_id)
        self.turns.setdefault(conversation_id, []).append(exchange)

    async def ping(self) -> bool:
        return self.healthy


class ListPublisher:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.started = self.closed = False

    def submit(self, event: Event) -> None:
        self.events.append(event)

    async def start(self) -> None:
        self.started = True

    async def close(self, timeout: float = 5.0) -> None:
        self.closed = True

    @property
    def backlog(self) -> int:
        return 0

    def types(self) -> list[str]:
        return [e.event_type for e in self.events]
