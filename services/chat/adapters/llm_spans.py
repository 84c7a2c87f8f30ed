"""OpenTelemetry's GenAI conventions for the span of an LLM call, for every generator."""
from __future__ import annotations

from opentelemetry.trace import Span

from services.chat.ports import Generation


def span_attributes(model: str, max_tokens: int) -> dict[str, str | int]:
    """OpenTelemetry's GenAI conventions for the request side of an LLM call."""
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.request.max_tokens": max_tokens}


def record_on(span: Span, generation: Generation) -> None:
    span.set_attribute("gen_ai.response.model", generation.model)
    span.set_attribute("gen_ai.usage.input_tokens", generation.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", generation.completion_tokens)
    if generation.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [generation.finish_reason])
