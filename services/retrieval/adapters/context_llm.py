"""The contextual-chunking model through the OpenAI SDK, against LLM_BASE_URL (the endpoint chat uses),
and the one place that decides whether contextual chunking is on."""
from __future__ import annotations

import logging

import openai
from openai import AsyncOpenAI

from services.retrieval import metrics
from services.retrieval.adapters.prefix_cache import SqlitePrefixCache
from services.retrieval.contextual import Contextualizer
from services.retrieval.settings import Settings
from shared.errors import DependencyUnavailable

log = logging.getLogger("cairn.retrieval.contextual")


class OpenAIContextModel:
    def __init__(self, client: AsyncOpenAI, *, model: str, temperature: float = 0.0) -> None:
        self._client = client
        self._model = model
        self._temperature = temperature

    @property
    def model_name(self) -> str:
        return self._model

    async def complete(self, *, system: str, user: str, max_tokens: int) -> str:
        try:
            completion = await self._client.chat.completions.create(
                model=self._model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                temperature=self._temperature,
                max_tokens=max_tokens,
            )
        except openai.OpenAIError as exc:
            reason, message = _failure(exc)
            metrics.context_llm_failed(reason)
            raise DependencyUnavailable("llm", message) from exc
        if completion.usage:
            metrics.context_llm_used(
                completion.model or self._model,
                prompt_tokens=completion.usage.prompt_tokens,
                completion_tokens=completion.usage.completion_tokens,
            )
        if not completion.choices:
            metrics.context_llm_failed("no_choices")
            raise DependencyUnavailable("llm", "the model returned no choices")
        return completion.choices[0].message.content or ""

    async def close(self) -> None:
        await self._client.close()


def _failure(exc: openai.OpenAIError) -> tuple[str, str]:
    """The metric's reason for a failed call, and the error's message."""
    if isinstance(exc, openai.APIStatusError):
        return str(exc.status_code), f"the model endpoint answered {exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", "the model endpoint did not answer in time"
    # connection refused, unreadable response, ...
    return type(exc).__name__, f"the model endpoint is unreachable ({type(exc).__name__})"


def build_contextualizer(settings: Settings, *, force: bool = False) -> Contextualizer | None:
    """A Contextualizer when CONTEXTUAL_CHUNKS is on (or `force`, e.g. for `cairn eval`) and an LLM
    endpoint is configured; else None. Close it with `await contextualizer.close()`."""
    if not (settings.contextual_chunks or force):
        return None
    if not settings.llm_base_url or not settings.llm_model:
        if settings.contextual_chunks:
            log.warning("CONTEXTUAL_CHUNKS is on but LLM_BASE_URL / LLM_MODEL are not set: chunks get no prefix")
        return None
    api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused"
    client = AsyncOpenAI(
        base_url=settings.llm_base_url,
        api_key=api_key,
        timeout=settings.contextual_timeout_s,
        max_retries=settings.contextual_max_retries,
    )
    return Contextualizer(
        model=OpenAIContextModel(client, model=settings.llm_model),
        cache=SqlitePrefixCache(settings.contextual_cache_path),
        max_document_chars=settings.contextual_max_document_chars,
        concurrency=settings.contextual_concurrency,
    )
