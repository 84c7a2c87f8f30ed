"""What one chat request gathers on its way through the pipeline."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from services.chat.chunks import RetrievedChunk
from services.chat.models import ChatRequest, Timings
from services.chat.ports import Exchange
from services.chat.prompt import Prompt
from shared.caller import Caller


def elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


@dataclass
class Turn:
    """`stage` names the step running, for QueryFailed; `query` is the standalone question that
    retrieval and the model see (the user's own unless it was rewritten)."""

    request: ChatRequest
    caller: Caller
    model: str
    top_k: int
    conversation_id: str
    query: str
    started: float = field(default_factory=time.perf_counter)
    asked_at: float = field(default_factory=time.time)
    stage: str = "validation"
    timings: Timings = field(default_factory=Timings)
    history: list[Exchange] = field(default_factory=list)
    new_conversation: bool = True  # no earlier turn of conversation_id was found (none sent, expired or never kept)
    small_talk: str | None = None  # the reply, when the message was only small talk
    retrieved: list[RetrievedChunk] = field(default_factory=list)
    prompt: Prompt | None = None  # None: answer without asking the model
    context_cuts: int = 0  # times the prompt was halved because it was over the model's context window

    @property
    def used(self) -> list[RetrievedChunk]:
        """The passages given to the model; used[i] is passage [i + 1]."""
        return self.prompt.chunks if self.prompt else []

    @property
    def owner(self) -> str:
        return self.caller.user_id or "anonymous"
