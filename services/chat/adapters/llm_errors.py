"""What an error status from the model endpoint means, told in terms an operator can act on.

Servers word their errors differently; these are the forms OpenAI, Azure OpenAI, vLLM, llama.cpp's
server, TGI and other OpenAI-compatible servers send. Only the status, the error's code and type, and
whether its message names the context window are read: the message itself may quote the prompt. An
error object answered with 200 (by proxies such as LiteLLM or OpenRouter) is read as the status it names.
"""
from __future__ import annotations

import math
import re

import openai

from services.chat.adapters.llm_retry import failure_status, retry_after_s
from services.chat.errors import LLMContentFiltered, LLMContextExceeded, LLMRetryLater, LLMUnavailable

# OpenAI's and Azure's `code`; llama.cpp server's `type`.
CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
# vLLM and OpenAI: "maximum context length is N tokens"; llama.cpp: "exceeds the available context size";
# TGI: "`inputs` tokens + `max_new_tokens` must be <= N"; others: "prompt is too long".
CONTEXT_WORDING = re.compile(
    r"context[ _-]?(length|window|size)|max_model_len|tokens \+ `?max_new_tokens`? must be|prompt is too long",
    re.IGNORECASE,
)
CONTEXT_STATUSES = frozenset({400, 413, 422})
CONTEXT_MESSAGE = (
    "the prompt is longer than the model's context window, even with fewer passages: "
    "lower CONTEXT_TOKEN_BUDGET or LLM_MAX_TOKENS, or serve the model with a longer context"
)

# Azure OpenAI's `code` for a prompt its content filter refused (a filtered answer is a finish_reason instead).
CONTENT_FILTER_CODE = "content_filter"
CONTENT_FILTER_MESSAGE = (
    "the model's content filter refused the question or the passages found for it: ask it in other words"
)


def is_context_overflow(exc: openai.APIError) -> bool:
    if failure_status(exc) not in CONTEXT_STATUSES:
        return False
    error = exc.body if isinstance(exc.body, dict) else {}
    if exc.code in CONTEXT_CODES or error.get("type") in CONTEXT_CODES:
        return True
    message = error.get("message")
    return isinstance(message, str) and CONTEXT_WORDING.search(message) is not None


def status_failure(exc: openai.APIStatusError, *, model: str) -> LLMUnavailable:
    """The error a question fails with when the endpoint answered `exc` to a call for `model` (after any retries)."""
    status = exc.status_code
    if refused := _refused_prompt(exc):
        return refused
    asked = retry_after_s(exc.response.headers)
    wait = max(1, math.ceil(asked)) if asked is not None else None
    if status == 429:
        return LLMRetryLater("the model endpoint is rate limiting chat (429)", retry_after=wait)
    if status >= 500 and wait is not None:  # a server shedding load said when it will answer again
        return LLMRetryLater(f"the model endpoint answered {status} and asked to be called later", retry_after=wait)
    if status == 401:
        return LLMUnavailable("the model endpoint refused the API key (401): check LLM_API_KEY")
    if status == 403:
        return LLMUnavailable("the model endpoint denied access (403): check that LLM_API_KEY may use the model")
    if status == 404:
        return LLMUnavailable(
            f"the model endpoint answered 404: check LLM_BASE_URL and that it serves the model {model!r} "
            "(LLM_MODEL or CHAT_MODELS)"
        )
    return LLMUnavailable(f"the model endpoint answered {status}")


def answered_failure(exc: openai.APIError, message: str) -> LLMUnavailable:
    """The error a question fails with when the endpoint answered the error object `exc.body` with 200 (after
    any retries): `message`, which quotes the endpoint's own, mapped as the status the object names would be."""
    if refused := _refused_prompt(exc):
        return refused
    if failure_status(exc) == 429:  # no Retry-After: a 200 carries none
        return LLMRetryLater(message)
    return LLMUnavailable(message)


def _refused_prompt(exc: openai.APIError) -> LLMUnavailable | None:
    if failure_status(exc) == 400 and exc.code == CONTENT_FILTER_CODE:
        return LLMContentFiltered(CONTENT_FILTER_MESSAGE)
    if is_context_overflow(exc):
        return LLMContextExceeded(CONTEXT_MESSAGE)
    return None


def refuses_the_key(exc: openai.APIStatusError) -> bool:
    """401: the endpoint is up, and will refuse every call chat makes with this key. Not 403: a key
    restricted to chat completions (OpenAI's project keys can be) is refused /models alone."""
    return exc.status_code == 401
