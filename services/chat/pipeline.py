"""One chat turn: start → prepare (conversation, reformulation, retrieval, prompt) → generate → finish
(citations, grounding, confidence, conversation, events).

Each step lives in its own module; this one sequences them, times them and emits events.
`answer` and `open_stream` (streaming.py) share every step but generation, so a streamed answer is
post-processed exactly like a plain one.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from services.chat import events, metrics
from services.chat.answering import compose
from services.chat.chunks import RetrievedChunk
from services.chat.errors import LLMContextExceeded, UnknownModel
from services.chat.followups import resolve_history
from services.chat.models import ChatRequest, ChatResponse
from services.chat.ports import ConversationStore, Exchange, Generation, Generator, Reformulator, Retriever
from services.chat.prompt import build_prompt, halved_prompt
from services.chat.settings import Settings
from services.chat.small_talk import small_talk_reply
from services.chat.turn import Turn, elapsed_ms
from shared.broker import EventPublisher
from shared.caller import Caller
from shared.errors import ServiceError
from shared.json_types import is_blank

log = logging.getLogger(__name__)

# A prompt over the model's context window is sent again with half its passage text, then a quarter:
# an answer from the best passages beats an error, and the model refuses such a prompt at once.
CONTEXT_CUTS = 2


@dataclass(frozen=True)
class PipelineConfig:
    default_model: str
    allowed_models: tuple[str, ...]
    default_top_k: int = 8
    relevance_threshold: float = 0.25
    token_budget: int = 3500
    temperature: float = 0.1
    max_tokens: int = 512
    always_reformulate: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> PipelineConfig:
        return cls(
            default_model=settings.llm_model,
            allowed_models=tuple(settings.chat_models),
            default_top_k=settings.default_top_k,
            relevance_threshold=settings.relevance_threshold,
            token_budget=settings.context_token_budget,
            temperature=settings.llm_temperature,
            max_tokens=settings.llm_max_tokens,
            always_reformulate=settings.query_reformulation == "always",
        )


class ChatPipeline:
    def __init__(
        self,
        *,
        retriever: Retriever,
        generator: Generator,
        publisher: EventPublisher,
        config: PipelineConfig,
        conversations: ConversationStore | None = None,
        reformulator: Reformulator | None = None,
    ) -> None:
        self.retriever = retriever
        self.generator = generator
        self.publisher = publisher
        self.config = config
        self.conversations = conversations
        self.reformulator = reformulator

    async def answer(self, *, request: ChatRequest, caller: Caller) -> ChatResponse:
        turn = self.start(request=request, caller=caller)
        with self.failures_reported(turn):
            await self.prepare(turn)
            generation = await self._generate(turn) if turn.prompt else None
            return await self.finish(turn, generation)

    def resolve_model(self, model_id: str | None) -> str:
        if model_id is None:
            return self.config.default_model
        if model_id not in self.config.allowed_models:
            raise UnknownModel(model_id, list(self.config.allowed_models))
        return model_id

    def start(self, *, request: ChatRequest, caller: Caller) -> Turn:
        """Check the model choice, then record QuerySubmitted. An unknown model is refused like any invalid
        field, with no event: a name a client typed never becomes a model of the reports."""
        turn = Turn(
            request=request,
            caller=caller,
            model=self.resolve_model(request.model_id),
            top_k=request.top_k or self.config.default_top_k,
            conversation_id=request.conversation_id or uuid.uuid4().hex,
            query=request.query,
        )
        self.publisher.submit(
            events.query_submitted(
                caller=caller, query=request.query, conversation_id=turn.conversation_id, model=turn.model,
                top_k=turn.top_k,
            )
        )
        return turn

    @contextmanager
    def failures_reported(self, turn: Turn) -> Iterator[None]:
        """Publish QueryFailed for any error escaping the block, then let it propagate."""
        try:
            yield
        except ServiceError as exc:
            self.report_failure(turn, exc.code, exc)
            raise
        except Exception as exc:
            self.report_failure(turn, "internal_error", exc)
            raise

    def report_failure(self, turn: Turn, error: str, exc: BaseException) -> None:
        self.publisher.submit(
            events.query_failed(
                caller=turn.caller, query=turn.request.query, stage=turn.stage, error=error,
                error_type=type(exc).__name__, total_ms=elapsed_ms(turn.started),
            )
        )

    async def prepare(self, turn: Turn) -> None:
        """Everything before generation; leaves `turn.prompt` None when the model is not to be asked."""
        small_talk = small_talk_reply(turn.request.query)
        await self._load_history(turn)  # first, so another user's conversation_id is refused whatever is asked
        if small_talk is not None:
            turn.small_talk = small_talk
            return
        await self._reformulate(turn)
        turn.stage = "retrieval"
        step = time.perf_counter()
        turn.retrieved = await self.retriever.search(
            query=turn.query, top_k=turn.top_k, filters=turn.request.filters, caller=turn.caller
        )
        turn.timings.retrieval = elapsed_ms(step)
        relevant = self.relevant(turn.retrieved)
        if relevant:
            turn.prompt = build_prompt(query=turn.query, chunks=relevant, token_budget=self.config.token_budget)

    def relevant(self, chunks: list[RetrievedChunk]) -> list[RetrievedChunk]:
        return [c for c in chunks if c.relevance >= self.config.relevance_threshold]

    async def _load_history(self, turn: Turn) -> None:
        if turn.request.conversation_id is None:
            given = [(t.question, t.answer) for t in turn.request.history or [] if _has_subject(t.question)]
            turn.history = resolve_history(given)
            return
        if self.conversations is None:
            return
        turn.stage = "conversation"
        turn.history = await self.conversations.history(conversation_id=turn.conversation_id, user_id=turn.owner)
        # A kept conversation always holds a turn: none means it expired, or the client made the id up.
        turn.new_conversation = not turn.history

    async def _reformulate(self, turn: Turn) -> None:
        if self.reformulator is None or not (turn.history or self.config.always_reformulate):
            return
        turn.stage = "reformulate"
        step = time.perf_counter()
        turn.query = await self.reformulator.reformulate(query=turn.query, history=turn.history, model=turn.model)
        turn.timings.reformulate = elapsed_ms(step)

    async def _generate(self, turn: Turn) -> Generation:
        turn.stage = "generation"
        step = time.perf_counter()
        while True:
            try:
                generation = await self.generator.generate(model=turn.model, **self.generation_options(turn))
                break
            except LLMContextExceeded as exc:
                self.cut_prompt(turn, exc)
        turn.timings.generation = elapsed_ms(step)
        return generation

    def cut_prompt(self, turn: Turn, failure: LLMContextExceeded) -> None:
        """Halve the prompt's passage text after the model found it over its context window, or raise
        `failure` when it was cut CONTEXT_CUTS times already or no passage would be left."""
        assert turn.prompt is not None
        smaller = halved_prompt(turn.prompt, query=turn.query) if turn.context_cuts < CONTEXT_CUTS else None
        if smaller is None:
            raise failure
        log.warning(
            "prompt over the model's context window, asking again with fewer passages",
            extra={"model": turn.model, "passages": len(turn.prompt.chunks), "now": len(smaller.chunks)},
        )
        metrics.count_retry(failure.code)
        turn.context_cuts += 1
        turn.prompt = smaller

    def generation_options(self, turn: Turn) -> dict:
        assert turn.prompt is not None
        return {
            "messages": turn.prompt.messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }

    async def finish(self, turn: Turn, generation: Generation | None) -> ChatResponse:
        """Cite, check, score, keep the turn for follow-ups and publish ResponseGenerated."""
        turn.stage = "citations"
        response = compose(turn, generation, relevance_threshold=self.config.relevance_threshold)
        metrics.observe_turn(turn.timings)
        if turn.small_talk is None:
            await self._remember(turn, response)
        # Last, with no await after it: a batch of events this one completes is sent once the response is out.
        self.publisher.submit(events.response_generated(caller=turn.caller, response=response, model=turn.model))
        return response

    async def _remember(self, turn: Turn, response: ChatResponse) -> None:
        # A caller that sends its history keeps the conversation itself (every /v1 client): a stored copy would
        # never be read, yet hold the exchange in Redis for CONVERSATION_TTL_S.
        keeps_its_own = turn.request.history is not None and turn.request.conversation_id is None
        if self.conversations is None or keeps_its_own:
            return
        turn.stage = "conversation"  # a streamed turn's reader leaving during the write is reported here
        exchange = Exchange(
            question=turn.request.query, standalone=turn.query, answer=response.answer, asked_at=turn.asked_at
        )
        try:
            await self.conversations.append(conversation_id=turn.conversation_id, user_id=turn.owner, exchange=exchange)
        except Exception:  # the answer stands; only the next follow-up loses this turn
            log.warning("conversation turn not kept", extra={"conversation_id": turn.conversation_id}, exc_info=True)


def _has_subject(past_question: str) -> bool:
    """Small talk and blank questions are left out of a client's history, as a stored conversation never holds
    them: neither "thanks" nor a question of zero-width spaces is a subject to follow up on."""
    return not is_blank(past_question) and small_talk_reply(past_question) is None
