"""The built-in offline generator as the Generator port, called in-process: chat's generator when no
LLM_BASE_URL is set. It gives the answers its OpenAI-compatible endpoint (services.chat.offline_llm) gives,
without the SDK's request and response handling and an ASGI app in between, which cost about four times
the answer itself (docs/benchmarks.md, "End to end")."""
from __future__ import annotations

from collections.abc import AsyncIterator

from opentelemetry.trace import StatusCode

from services.chat import metrics
from services.chat.adapters.llm_spans import record_on, span_attributes
from services.chat.offline_llm.app import word_deltas
from services.chat.offline_llm.completion import reply
from services.chat.ports import Generation
from shared.tracing import start_span


class OfflineGenerator:
    """Implements ports.Generator. It cannot be unavailable; temperature does not change its answers."""

    async def generate(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> Generation:
        return self._answer(model=model, messages=messages, max_tokens=max_tokens)

    async def stream(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> AsyncIterator[str | Generation]:
        generation = self._answer(model=model, messages=messages, max_tokens=max_tokens)
        for word in word_deltas(generation.text):
            yield word
        yield generation

    def _answer(self, *, model: str, messages: list[dict[str, str]], max_tokens: int) -> Generation:
        span = start_span(f"chat {model}", attributes=span_attributes(model, max_tokens))
        try:
            answer = reply(((m["role"], m.get("content") or "") for m in messages), limit=max_tokens)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR, type(exc).__name__)
            span.end()
            raise
        generation = Generation(
            text=answer.content, model=model, prompt_tokens=answer.prompt_tokens,
            completion_tokens=answer.completion_tokens, finish_reason=answer.finish_reason,
        )
        record_on(span, generation)
        span.end()
        metrics.count_tokens(generation)
        return generation

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        return None
