"""One chat turn: retrieve → (no relevant passage: say so) → prompt → generate → cite → score.

Each step lives in its own module; this one only sequences them, times them and emits events.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from services.chat import events
from services.chat.chunks import RetrievedChunk
from services.chat.citations import CitedAnswer, resolve_citations
from services.chat.confidence import Confidence, assess, no_information
from services.chat.errors import UnknownModel
from services.chat.models import ChatRequest, ChatResponse, Metadata, Timings, UsageOut
from services.chat.ports import Generation, Generator, Retriever
from services.chat.presentation import citation_out, confidence_out, related_docs, sources_out
from services.chat.prompt import build_prompt
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
        model = self.resolve_model(request.model_id)
        top_k = request.top_k or self.config.default_top_k
        started = time.perf_counter()
        self.publisher.submit(
            events.query_submitted(
                caller=caller, query=request.query, conversation_id=request.conversation_id, model=model, top_k=top_k
            )
        )
        stage = "retrieval"
        try:
            timings = Timings()
            step = time.perf_counter()
            chunks = await self.retriever.search(
                query=request.query, top_k=top_k, filters=request.filters, caller=caller
            )
            timings.retrieval = _ms(step)
            relevant = [c for c in chunks if c.relevance >= self.config.relevance_threshold]
            if not relevant:
                best = max((c.relevance for c in chunks), default=None)
                confidence = no_information(best_relevance=best, threshold=self.config.relevance_threshold)
                return self._finish(
                    request=request, caller=caller, started=started, timings=timings, retrieved=chunks, used=[],
                    generation=None, cited=None, confidence=confidence,
                )

            stage = "generation"
            prompt = build_prompt(query=request.query, chunks=relevant, token_budget=self.config.token_budget)
            step = time.perf_counter()
            generation = await self.generator.generate(
                model=model, messages=prompt.messages, temperature=self.config.temperature, max_tokens=self.config.max_tokens
            )
            timings.generation = _ms(step)

            stage = "citations"
            step = time.perf_counter()
            cited = resolve_citations(generation.text, prompt.chunks)
            confidence = assess(relevances=[c.relevance for c in prompt.chunks], citation_count=len(cited.citations))
            timings.citations = _ms(step)
            return self._finish(
                request=request, caller=caller, started=started, timings=timings, retrieved=chunks,
                used=prompt.chunks, generation=generation, cited=cited, confidence=confidence,
            )
        except ServiceError as exc:
            self._failed(request, caller, started, stage, exc.code)
            raise
        except Exception:
            self._failed(request, caller, started, stage, "internal_error")
            raise

    def _finish(
        self,
        *,
        request: ChatRequest,
        caller: Caller,
        started: float,
        timings: Timings,
        retrieved: list[RetrievedChunk],
        used: list[RetrievedChunk],
        generation: Generation | None,
        cited: CitedAnswer | None,
        confidence: Confidence,
    ) -> ChatResponse:
        # Anti-hallucination hook: an answer that cites nothing is not shown (a later issue refines this).
        answered = cited is not None and bool(cited.citations)
        if not answered:
            cited = CitedAnswer(answer=NO_INFORMATION, citations=[])  # confidence is already Low here
        relevant = [c for c in retrieved if c.relevance >= self.config.relevance_threshold]
        usage = UsageOut()
        if generation:
            usage = UsageOut(
                prompt_tokens=generation.prompt_tokens,
                completion_tokens=generation.completion_tokens,
                total_tokens=generation.prompt_tokens + generation.completion_tokens,
            )
        timings.total = _ms(started)
        response = ChatResponse(
            query=request.query,
            answer=cited.answer,
            citations=[citation_out(c) for c in cited.citations],
            sources=sources_out(cited.citations),
            related_docs=related_docs(relevant, cited.citations),
            confidence=confidence_out(confidence),
            metadata=Metadata(
                request_id=request_id_var.get(),
                model=generation.model if generation else None,
                reformulated_query=request.query,
                chunks_retrieved=len(retrieved),
                chunks_used=len(used),
                timings_ms=timings,
                usage=usage,
                finish_reason=generation.finish_reason if generation else None,
            ),
        )
        self.publisher.submit(events.response_generated(caller=caller, response=response, answered=answered))
        return response

    def _failed(self, request: ChatRequest, caller: Caller, started: float, stage: str, error: str) -> None:
        self.publisher.submit(
            events.query_failed(caller=caller, query=request.query, stage=stage, error=error, total_ms=_ms(started))
        )
