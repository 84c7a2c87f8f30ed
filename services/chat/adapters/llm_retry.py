"""The one retry policy for calls to the model endpoint: which failures earn another attempt, how long
to wait before it (exponential backoff with jitter, or the server's Retry-After), and the tenacity loop
that applies both. The delay arithmetic is pure so tests check it without waiting."""
from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any, TypeVar

import openai
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from services.chat import metrics

log = logging.getLogger(__name__)

T = TypeVar("T")
JITTER = 0.25  # a computed backoff grows by 0-25 % so that clients that failed together retry apart


# What an error object's `code`, `type` or `status` string says, when it names no status number: OpenAI's,
# Anthropic's and Google's words as OpenAI-compatible proxies relay them, and vLLM's exception names.
ERROR_KINDS = {
    **dict.fromkeys(
        ("rate_limit_exceeded", "rate_limit_error", "rate_limited", "too_many_requests", "resource_exhausted"), 429
    ),
    **dict.fromkeys(("server_error", "internal_server_error", "internalservererror", "api_error", "internal"), 500),
    **dict.fromkeys(("overloaded", "overloaded_error", "service_unavailable", "unavailable"), 503),
    **dict.fromkeys(
        ("invalid_request_error", "badrequesterror", "invalid_argument", "context_length_exceeded",
         "exceed_context_size_error", "content_filter"), 400
    ),
    **dict.fromkeys(("authentication_error", "invalid_api_key", "unauthenticated"), 401),
    **dict.fromkeys(("permission_error", "permission_denied"), 403),
    **dict.fromkeys(("not_found_error", "model_not_found", "not_found"), 404),
}


def is_retryable(exc: BaseException) -> bool:
    """429 and 5xx answers (and error objects answered with 200 that stand for one), timeouts, refused or
    dropped connections; never another 4xx, nor an error object that names no status."""
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is one too
        return True
    status = failure_status(exc)
    return status is not None and (status == 429 or status >= 500)


def failure_status(exc: BaseException) -> int | None:
    """The status an endpoint answered with; for an error object it answered with 200 (a plain APIError whose
    body is the object, whole or as a stream's event), the status the object itself names; else None."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code
    if type(exc) is openai.APIError and isinstance(exc.body, dict):
        return answered_status(exc.body)
    return None


def answered_status(error: dict[str, Any]) -> int | None:
    """The error status an error object names: its `code` or `status` as a number ("502" too, as LiteLLM
    sends it), else a known word in its `code`, `type` or `status`; None when it names none."""
    for field in ("code", "status"):
        if (status := _error_status(error.get(field))) is not None:
            return status
    for field in ("code", "type", "status"):
        if isinstance(word := error.get(field), str) and (status := ERROR_KINDS.get(word.lower())) is not None:
            return status
    return None


def _error_status(value: object) -> int | None:
    if isinstance(value, str) and len(value) == 3 and value.isascii() and value.isdigit():  # "502", as a status
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
        return value
    return None


def retry_after_s(headers: Mapping[str, str], *, now: Callable[[], float] = time.time) -> float | None:
    """The wait a response asks for: `retry-after-ms`, else `Retry-After` as seconds or as an HTTP date.

    None when neither header is there or readable. A date in the past gives a negative number.
    `headers` should be case-insensitive (httpx2.Headers) or use lower-case names.
    """
    millis = _finite(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _finite(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": HTTP dates are always UTC
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp() - now()


def _finite(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def retry_delay(
    retry: int, *, base_s: float, cap_s: float, retry_after: float | None = None, jitter: float = 0.0
) -> float:
    """Seconds to wait before retry number `retry` (1 = the first retry).

    With a Retry-After, exactly that, bounded to [0, cap_s] (RetryPolicy does not retry when it asks for
    more than cap_s). Otherwise base_s * 2**(retry - 1), at most cap_s, plus `jitter` (a draw from [0, 1))
    times 25 %.
    """
    if retry < 1:
        raise ValueError("retry counts from 1")
    if retry_after is not None:
        return min(max(retry_after, 0.0), cap_s)
    backoff = min(base_s * 2.0 ** min(retry - 1, 60), cap_s)
    return backoff * (1 + JITTER * jitter)


@dataclass(frozen=True)
class RetryPolicy:
    """Up to `max_retries` retries of a retryable failure, then the last failure is raised as it was.

    A failure whose Retry-After asks for more than cap_s, or for more than is left of `deadline_s` (counted
    from the first attempt), is raised at once: a retry sooner than asked is likely refused again and adds
    load to an endpoint that is already shedding it, and the caller can be told the endpoint's own wait.
    `sleep` and `random` are there for tests, which must not wait real seconds.
    """

    max_retries: int = 3
    base_s: float = 1.0
    cap_s: float = 10.0
    deadline_s: float | None = None
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
    random: Callable[[], float] = random.random

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.base_s < 0 or self.cap_s < 0:
            raise ValueError("max_retries, base_s and cap_s must not be negative")

    async def run(self, call: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """`await call(*args, **kwargs)`, retried per this policy."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1) | self._asks_too_long,
            retry=retry_if_exception(is_retryable),
            wait=self._wait,
            before_sleep=_log_retry,
            sleep=self.sleep,
            reraise=True,
        )

        # tenacity calls a non-`async def` callable (the SDK's decorated create) without awaiting it
        async def attempt() -> T:
            return await call(*args, **kwargs)

        return await retrying(attempt)

    def _wait(self, state: RetryCallState) -> float:
        return retry_delay(
            state.attempt_number, base_s=self.base_s, cap_s=self.cap_s, retry_after=_asked(state), jitter=self.random()
        )

    def _asks_too_long(self, state: RetryCallState) -> bool:
        asked = _asked(state)
        if asked is None:
            return False
        allowed = self.cap_s
        if self.deadline_s is not None:
            allowed = min(allowed, self.deadline_s - (state.seconds_since_start or 0.0))
        return asked > allowed


def _asked(state: RetryCallState) -> float | None:
    """The Retry-After of the failed attempt, None when it sent none (or failed without a response)."""
    failure = state.outcome.exception() if state.outcome else None
    response = failure.response if isinstance(failure, openai.APIStatusError) else None
    return retry_after_s(response.headers) if response is not None else None


def _log_retry(state: RetryCallState) -> None:
    failure = state.outcome.exception() if state.outcome else None
    status = failure.status_code if isinstance(failure, openai.APIStatusError) else None
    error = type(failure).__name__
    delay = state.upcoming_sleep
    metrics.count_retry(str(status) if status is not None else error)
    # only the status and the exception's type: messages may carry prompt text
    log.warning(
        "llm retry status=%s error=%s attempt=%d delay_s=%.3f",
        status, error, state.attempt_number, delay,
        extra={"status": status, "error": error, "attempt": state.attempt_number, "delay_s": round(delay, 3)},
    )
