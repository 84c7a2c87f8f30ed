"""One chat turn: prepare (retrieve, decide, build the prompt) → generate → finish (cite, score, report).

Each step lives in its own module; this one only sequences them, times them and emits events.
`answer` and `stream` share `_prepare` and `_finish`, so a streamed answer is post-processed
exactly like a plain one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from services.chat import events
from services.chat.chunks import RetrievedChunk
from services.chat.citations import CitedAnswer, resolve_citations
from services.chat.confidence import Confidence, assess, no_information
from services.chat.errors import UnknownModel
from services.chat.models import ChatRequest, ChatResponse, Metadata, Timings, UsageOut
from services.chat.ports import Generation, Generator, Retriever
from services.chat.presentation import citation_out, confidence_out, related_docs, sources_out
from services.chat.prompt import Prompt, build_prompt
from services.chat.settings import Settings
from shared.broker import EventPublisher
from shared.caller import Caller
from shared.context import request_id_var
from shared.errors import ServiceError

NO_INFORMATION = "I couldn't find relevant information in the documents to answer that."


@dataclass(frozen=True)
class PipelineConfig:
    default_model: str
    allowed_models: tuple[str, ...]
    default_top_k: int = 8
    relevance_threshold: float = 0.25
    token_budget: int = 3500
    temperature: float = 0.1
    max_tokens: int = 512

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
        )


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 1)


@dataclass
class Turn:
    """What one request has gathered so far; `stage` names the step running, for QueryFailed."""

    request: ChatRequest
    caller: Caller
    model: str
    top_k: int
    started: float = field(default_factory=time.perf_counter)
    stage: str = "retrieval"
    timings: Timings = field(default_factory=Timings)
    query: str = ""  # the standalone question sent to retrieval and the model
    retrieved: list[RetrievedChunk] = field(default_factory=list)
    prompt: Prompt | None = None  # None: answer without asking the model

    @property
    def used(self) -> list[RetrievedChunk]:
        return self.prompt.chunks if self.prompt else []


class ChatPipeline:
    def __init__(
        self, *, retriever: Retriever, generator: Generator, publisher: EventPublisher, config: PipelineConfig
    ) -> None:
        self.retriever = retriever
        self.generator = generator
        self.publisher = publisher
        self.config = config

    def resolve_model(self, model_id: str | None) -> str:
        if model_id is None:
            return self.config.default_model
        if model_id not in self.config.allowed_models:
            raise UnknownModel(model_id, list(self.config.allowed_models))
        return model_id

    async def answer(self, *, request: ChatRequest, caller: Caller) -> ChatResponse:
        turn = self._start(request, caller)
        try:
            await self._prepare(turn)
            generation = None
            if turn.prompt is not None:
                turn.stage = "generation"
                step = time.perf_counter()
                generation = await self.generator.generate(
                    model=turn.model,
                    messages=turn.prompt.messages,
                    temperature=self.config.temperature,
                    max_tokens=self.config.max_tokens,
                )
                turn.timings.generation = _ms(step)
            return self._finish(turn, generation)
        except ServiceError as exc:
            self._failed(turn, exc.code)
            raise
        except Exception:
            self._failed(turn, "internal_error")
            raise

    def _start(self, request: ChatRequest, caller: Caller) -> Turn:
        turn = Turn(
            request=request,
            caller=caller,
            model=self.resolve_model(request.model_id),
            top_k=request.top_k or self.config.default_top_k,
            query=request.query,
        )
        self.publisher.submit(
            events.query_submitted(
                caller=caller, query=request.query, conversation_id=request.conversation_id, model=turn.model,
                top_k=turn.top_k,
            )
        )
        return turn

    async def _prepare(self, turn: Turn) -> None:
        """Retrieve, and build the prompt when a passage is relevant enough to answer from."""
        turn.stage = "retrieval"
        step = time.perf_counter()
        turn.retrieved = await self.retriever.search(
            query=turn.query, top_k=turn.top_k, filters=turn.request.filters, caller=turn.caller
        )
        turn.timings.retrieval = _ms(step)
        relevant = self._relevant(turn.retrieved)
        if relevant:
            turn.prompt = build_prompt(query=turn.query, chunks=relevant, token_budget=self.config.token_budget)

    def _relevant(self, chunks: list[RetrievedChunk]) -> list[RetrievedChunk]:
        return [c for c in chunks if c.relevance >= self.config.relevance_threshold]

    def _finish(self, turn: Turn, generation: Generation | None) -> ChatResponse:
        """Cite, score, build the response and publish ResponseGenerated."""
        turn.stage = "citations"
        step = time.perf_counter()
        cited: CitedAnswer | None = None
        if generation is None:
            best = max((c.relevance for c in turn.retrieved), default=None)
            confidence: Confidence = no_information(best_relevance=best, threshold=self.config.relevance_threshold)
        else:
            cited = resolve_citations(generation.text, turn.used)
            confidence = assess(relevances=[c.relevance for c in turn.used], citation_count=len(cited.citations))
        # Anti-hallucination: an answer that cites nothing is not shown.
        answered = cited is not None and bool(cited.citations)
        if not answered:
            cited = CitedAnswer(answer=NO_INFORMATION, citations=[])  # confidence is already Low here
        turn.timings.citations = _ms(step)
        usage = UsageOut()
        if generation:
            usage = UsageOut(
                prompt_tokens=generation.prompt_tokens,
                completion_tokens=generation.completion_tokens,
                total_tokens=generation.prompt_tokens + generation.completion_tokens,
            )
        turn.timings.total = _ms(turn.started)
        response = ChatResponse(
            query=turn.request.query,
            answer=cited.answer,
            citations=[citation_out(c) for c in cited.citations],
            sources=sources_out(cited.citations),
            related_docs=related_docs(self._relevant(turn.retrieved), cited.citations),
            confidence=confidence_out(confidence),
            metadata=Metadata(
                request_id=request_id_var.get(),
                model=generation.model if generation else None,
                reformulated_query=turn.query,
                chunks_retrieved=len(turn.retrieved),
                chunks_used=len(turn.used),
                timings_ms=turn.timings,
                usage=usage,
                finish_reason=generation.finish_reason if generation else None,
            ),
        )
        self.publisher.submit(events.response_generated(caller=turn.caller, response=response, answered=answered))
        return response

    def _failed(self, turn: Turn, error: str) -> None:
        self.publisher.submit(
            events.query_failed(
                caller=turn.caller, query=turn.request.query, stage=turn.stage, error=error, total_ms=_ms(turn.started)
            )
        )
