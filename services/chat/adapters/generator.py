"""Generation through the OpenAI Python SDK, against any OpenAI-compatible endpoint or, with no
LLM_BASE_URL, the built-in offline generator served in-process over an ASGI transport — so the SDK's
real request and response handling runs in the demo and in every test."""
from __future__ import annotations

import logging

import httpx2  # the HTTP library the openai SDK (>= 3) is built on
import openai
from openai import AsyncOpenAI

from services.chat.errors import LLMUnavailable
from services.chat.ports import Generation
from services.chat.settings import Settings

log = logging.getLogger(__name__)

OFFLINE_BASE_URL = "http://offline-llm/v1"


class OpenAIGenerator:
    def __init__(self, client: AsyncOpenAI, *, offline: bool = False) -> None:
        self._client = client
        self._offline = offline

    async def generate(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> Generation:
        try:
            completion = await self._client.chat.completions.create(
                model=model, messages=messages, temperature=temperature, max_tokens=max_tokens
            )
        except openai.APIStatusError as exc:
            log.warning("llm answered an error", extra={"status": exc.status_code, "model": model})
            raise LLMUnavailable(f"the model endpoint answered {exc.status_code}") from exc
        except openai.APITimeoutError as exc:
            raise LLMUnavailable("the model endpoint did not answer in time") from exc
        except openai.OpenAIError as exc:  # connection refused, unreadable response, ...
            raise LLMUnavailable(f"the model endpoint is unreachable ({type(exc).__name__})") from exc
        if not completion.choices:
            raise LLMUnavailable("the model returned no choices")
        choice = completion.choices[0]
        usage = completion.usage
        return Generation(
            text=choice.message.content or "",
            model=completion.model or model,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            finish_reason=choice.finish_reason,
        )

    async def ping(self) -> bool:
        if self._offline:
            return True
        try:
            await self._client.with_options(timeout=2.0, max_retries=0).models.list()
        except openai.APIStatusError:
            return True  # it answered; not every compatible server offers /models
        except openai.OpenAIError:
            return False
        return True

    async def close(self) -> None:
        await self._client.close()


def build_generator(settings: Settings) -> OpenAIGenerator:
    """The one place that decides between the configured endpoint and the offline generator."""
    if settings.offline:
        from services.chat.offline_llm.app import create_app as create_offline_app

        http_client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=create_offline_app()))
        client = AsyncOpenAI(
            base_url=OFFLINE_BASE_URL, api_key="offline", http_client=http_client, timeout=settings.llm_timeout_s
        )
        return OpenAIGenerator(client, offline=True)
    api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused"
    client = AsyncOpenAI(
        base_url=settings.llm_base_url,
        api_key=api_key,
        timeout=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
    )
    return OpenAIGenerator(client)
