"""The contextual-chunking model through the OpenAI SDK, against LLM_BASE_URL (the endpoint chat uses),
and the one place that decides whether contextual chunking is on."""
from __future__ import annotations

import logging

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

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
        except ValueError as exc:  # a body sent as JSON that does not parse
            raise _invalid("the model endpoint answered with unreadable JSON") from exc
        if not isinstance(completion, ChatCompletion):  # a body that is not JSON at all, such as a proxy's page
            raise _invalid("the model endpoint did not answer with a chat completion")
        # The SDK does not validate what it reads: any field may be missing or of another type.
        self._meter(completion)
        choices = getattr(completion, "choices", None)
        if choices is None or choices == []:
            metrics.context_llm_failed("no_choices")
            raise DependencyUnavailable("llm", "the model returned no choices")
        if not isinstance(choices, list):
            raise _invalid("the model's choices are not a list")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None) if message is not None else None
        if message is None or not isinstance(content, (str, type(None))):
            raise _invalid("the model's answer holds no text message")
        return content or ""

    def _meter(self, completion: ChatCompletion) -> None:
        usage = getattr(completion, "usage", None)
        prompt, written = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        if _is_count(prompt) and _is_count(written):
            named = getattr(completion, "model", None)
            model = named if isinstance(named, str) and named else self._model
            metrics.context_llm_used(model, prompt_tokens=prompt, completion_tokens=written)

    async def close(self) -> None:
        await self._client.close()


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _invalid(message: str) -> DependencyUnavailable:
    metrics.context_llm_failed("invalid_response")
    return DependencyUnavailable("llm", message)


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
        deadline_s=settings.contextual_deadline_s,
    )
