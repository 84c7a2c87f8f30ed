"""Generation through the OpenAI Python SDK, against any OpenAI-compatible endpoint or, with no
LLM_BASE_URL, the built-in offline generator served in-process over an ASGI transport — so the SDK's
real request and response handling runs in the demo and in every test."""
from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2  # the HTTP library the openai SDK (>= 3) is built on
import openai
from openai import AsyncAPIResponse, AsyncOpenAI, AsyncStream, DefaultAioHttpClient, RequestOptions
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from opentelemetry.trace import Span, SpanKind, StatusCode

from services.chat import metrics
from services.chat.adapters.circuit_breaker import CircuitBreaker
from services.chat.adapters.completion_shapes import is_chunk, is_completion, token_counts
from services.chat.adapters.llm_errors import answered_failure, refuses_the_key, status_failure
from services.chat.adapters.llm_retry import RetryPolicy, is_retryable
from services.chat.errors import LLMRetryLater, LLMUnavailable
from services.chat.ports import Generation
from services.chat.settings import Settings
from shared.tracing import client_span, inject, start_span

log = logging.getLogger(__name__)
OFFLINE_BASE_URL = "http://offline-llm/v1"
COMPLETION = "a chat completion"
STREAM = "a stream of chat completion chunks"
ERROR_MESSAGE_CHARS = 200  # of an endpoint's own error message: enough to act on, not a quoted prompt
# The finish_reason of an answer the model failed part way: OpenRouter's "error", vLLM's "abort". The text
# so far is no answer, however complete it reads.
FAILED_FINISH = frozenset({"error", "abort"})


class OpenAIGenerator:
    """The Generator port over the openai SDK, with one retry policy: `policy`, never the SDK's own."""

    def __init__(
        self, client: AsyncOpenAI, *, policy: RetryPolicy | None = None, deadline_s: float | None = None,
        offline: bool = False, breaker: CircuitBreaker | None = None,
    ) -> None:
        if client.max_retries != 0:
            raise ValueError("build the client with max_retries=0: the RetryPolicy is the only retry loop")
        self._client = client
        self._policy = policy or RetryPolicy()
        self._deadline_s = deadline_s  # over all attempts; None: only the client's per-attempt timeout
        self._offline = offline
        self._breaker = breaker

    async def generate(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> Generation:
        trace_headers: dict[str, str] = {}  # an endpoint that traces continues the LLM span
        with client_span(f"chat {model}", trace_headers, _span_attributes(model, max_tokens)) as span:
            try:
                with self._watched():
                    async with asyncio.timeout(self._deadline_s):
                        completion = await self._policy.run(
                            self._post,
                            {"model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens},
                            trace_headers,
                        )
            except TimeoutError as exc:
                raise LLMUnavailable(f"the model did not answer within {self._deadline_s:g} s") from exc
            except openai.OpenAIError as exc:
                raise _unavailable(exc, model, self._client.api_key) from exc
            if not completion.choices:
                raise LLMUnavailable("the model returned no choices")
            choice = completion.choices[0]
            prompt_tokens, completion_tokens = token_counts(completion.usage)
            generation = Generation(
                text=(choice.message.content if choice.message else None) or "",
                model=completion.model or model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                finish_reason=choice.finish_reason,
            )
            _record_on(span, generation)
            metrics.count_tokens(model, generation)
            return generation

    async def stream(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> AsyncIterator[str | Generation]:
        """Retried until the first text arrives; a failure after it raises LLMUnavailable at once."""
        # Not the current span: this generator's body runs in its consumer's context between yields.
        span = start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=_span_attributes(model, max_tokens))
        trace_headers: dict[str, str] = {}
        inject(trace_headers, span=span)
        body = {
            "model": model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True},
        }
        try:
            try:
                with self._watched():  # until the first text: a stream that breaks later is not judged
                    async with asyncio.timeout(self._deadline_s):
                        chunks, head = await self._policy.run(self._open_stream, body, trace_headers)
            except TimeoutError as exc:
                raise LLMUnavailable(f"the model sent no text within {self._deadline_s:g} s") from exc
            except openai.OpenAIError as exc:
                raise _unavailable(exc, model, self._client.api_key) from exc
            tally = _Tally(model=model)
            try:  # closing the response is what tells the server that the reader went away
                for chunk in head:
                    if text := tally.add(chunk):
                        yield text
                while (chunk := await _next_chunk(chunks)) is not None:
                    if text := tally.add(chunk):
                        yield text
            finally:
                await chunks.close()
            # The connection ended cleanly, but the answer did not, or the model failed part way.
            if tally.finish_reason is None or tally.finish_reason in FAILED_FINISH:
                raise LLMUnavailable("the model's answer broke off before it was finished")
            _record_on(span, tally.generation())
            metrics.count_tokens(model, tally.generation())
        except GeneratorExit:  # the reader went away: not the model's failure
            raise
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR, type(exc).__name__)
            raise
        finally:
            span.end()
        yield tally.generation()

    @contextmanager
    def _watched(self) -> Iterator[None]:
        """Fail at once while the breaker is open; else tell it whether the endpoint failed the call (after
        every retry: timeouts, connections, 429 and 5xx, as a status or as an error object answered with 200
        that names one) or answered it (a 4xx is the request's fault)."""
        if self._breaker is None:
            yield
            return
        if not self._breaker.allow():
            # Told to try again when the breaker lets a trial through; half-open with the trial out, in a second.
            wait_s = max(1, math.ceil(self._breaker.seconds_until_trial()))
            raise LLMRetryLater("the model endpoint is failing; calls are paused while it recovers", retry_after=wait_s)
        try:
            yield
        except (TimeoutError, openai.OpenAIError) as exc:
            if isinstance(exc, TimeoutError) or is_retryable(exc):
                self._breaker.record_failure()
            else:
                self._breaker.record_success()
            raise
        except BaseException:  # cancelled, or a body that is no completion: no verdict on the endpoint
            self._breaker.abandon()
            raise
        self._breaker.record_success()

    async def _post(self, body: dict[str, Any], headers: dict[str, str]) -> ChatCompletion:
        # The SDK's generic `post`, not `chat.completions.create`: create() first walks the body against
        # its typed-dict unions (every message against each message type), which cost 1.5-2 ms per call
        # for an 8-passage prompt, more than the offline generator's whole answer. Our body is plain JSON
        # the walk leaves unchanged; the request, errors and typed response are the SDK's own either way.
        # Cast to AsyncAPIResponse: the SDK's own parse, with the response at hand to name what came instead.
        response = await self._client.post(
            "/chat/completions", body=body, cast_to=AsyncAPIResponse[ChatCompletion], options=_options(headers)
        )
        try:
            completion = await response.parse()
        except ValueError as exc:  # a JSON content type, and a body that is not JSON
            raise _not_a(COMPLETION, response.http_response) from exc
        if not is_completion(completion):  # the SDK returns any other body as text, any JSON object unchecked
            if (error := _error_object(response.http_response)) is not None:  # as the SDK raises it in a stream
                raise openai.APIError(_error_message(error), response.http_response.request, body=error)
            raise _not_a(COMPLETION, response.http_response)
        if (error := _failed_choice_error(completion)) is not None:  # retried and judged as that error object
            raise openai.APIError(_error_message(error), response.http_response.request, body=error)
        return completion

    async def _open_stream(
        self, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[AsyncStream[ChatCompletionChunk], list[ChatCompletionChunk]]:
        """Start a streamed completion and read it up to its first text, so that everything that can
        fail before the caller sees a word is inside one retryable call."""
        chunks = await self._client.post(
            "/chat/completions", body=body, cast_to=ChatCompletion, options=_options(headers),
            stream=True, stream_cls=AsyncStream[ChatCompletionChunk],
        )
        head: list[ChatCompletionChunk] = []
        try:
            while not head or not _text_of(head[-1]):
                if (chunk := await _read_chunk(chunks)) is None:
                    break  # the whole answer came without text
                head.append(chunk)
            if not head:  # an HTML page or a JSON body holds no event at all: no answer, not an empty one
                raise _not_a(STREAM, chunks.response)
        except BaseException:
            await chunks.close()
            raise
        return chunks, head

    async def ping(self) -> bool:
        if self._offline:
            return True
        try:
            await self._client.with_options(timeout=2.0).models.list()
        except openai.APIStatusError as exc:
            return not refuses_the_key(exc)  # else it answered; not every compatible server offers /models
        except openai.OpenAIError:
            return False
        return True

    async def close(self) -> None:
        await self._client.close()


class _Tally:
    """What a stream has said so far: text, and the model, usage and finish_reason once they come."""

    def __init__(self, *, model: str) -> None:
        self.model = model
        self.parts: list[str] = []
        self.prompt_tokens = self.completion_tokens = 0
        self.finish_reason: str | None = None

    def add(self, chunk: ChatCompletionChunk) -> str:
        """The chunk's text ("" for none)."""
        self.model = chunk.model or self.model
        if chunk.usage:  # servers that ignore stream_options never send it
            self.prompt_tokens, self.completion_tokens = token_counts(chunk.usage)
        if chunk.choices and chunk.choices[0].finish_reason:
            self.finish_reason = chunk.choices[0].finish_reason
        text = _text_of(chunk)
        self.parts.append(text)
        return text

    def generation(self) -> Generation:
        return Generation(
            text="".join(self.parts),
            model=self.model,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            finish_reason=self.finish_reason,
        )


def _text_of(chunk: ChatCompletionChunk) -> str:
    delta = chunk.choices[0].delta if chunk.choices else None
    return (delta.content or "") if delta else ""


async def _read_chunk(chunks: AsyncStream[ChatCompletionChunk]) -> ChatCompletionChunk | None:
    """The next chunk, None at the end. An event that is not a chunk is LLMUnavailable; the SDK's own
    errors (a dropped connection, an error event) pass as they are, for the caller to retry or not."""
    try:
        chunk = await anext(chunks)
    except StopAsyncIteration:
        return None
    except ValueError as exc:  # an event whose data is not JSON
        raise _not_a(STREAM, chunks.response) from exc
    if not is_chunk(chunk):  # the SDK builds a chunk from any JSON unchecked, and passes other JSON as is
        raise _not_a(STREAM, chunks.response)
    return chunk


async def _next_chunk(chunks: AsyncStream[ChatCompletionChunk]) -> ChatCompletionChunk | None:
    """The next chunk, None at the end; a failure now is final, since the caller already has text."""
    try:
        return await _read_chunk(chunks)
    except (openai.OpenAIError, LLMUnavailable) as exc:
        raise LLMUnavailable("the model's answer broke off part way") from exc


def _not_a(expected: str, response: httpx2.Response) -> LLMUnavailable:
    """Raised inside the retryable call but never retried (llm_retry.is_retryable): a wrong LLM_BASE_URL,
    a web UI or another API, gives the same answer to every attempt, and retrying only delays the error."""
    content_type = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    return LLMUnavailable(
        f"the model endpoint answered {response.status_code} with {content_type}, not {expected}: check LLM_BASE_URL"
    )


def _options(headers: dict[str, str]) -> RequestOptions:
    # As create() sends it: the API key as bearer token, and never an admin key the environment may hold.
    return {"headers": headers, "security": {"bearer_auth": True}}


def _span_attributes(model: str, max_tokens: int) -> dict[str, str | int]:
    """OpenTelemetry's GenAI conventions for the request side of an LLM call."""
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.request.max_tokens": max_tokens}


def _record_on(span: Span, generation: Generation) -> None:
    span.set_attribute("gen_ai.response.model", generation.model)
    span.set_attribute("gen_ai.usage.input_tokens", generation.prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", generation.completion_tokens)
    if generation.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [generation.finish_reason])


def _error_object(response: httpx2.Response) -> dict | None:
    """The `error` object of a 200 body such as `{"error": {"message": ...}}`, if it is one; a bare message
    (`{"error": "..."}`, as some servers send it) as the object holding it."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, str) and error.strip():
        return {"message": error}
    return error if isinstance(error, dict) else None


def _failed_choice_error(completion: ChatCompletion) -> dict | None:
    """The error a completion's choice ended in: its own `error` object (OpenRouter sends one, with the
    status it stands for), else one that names the finish_reason; None for an answer that did not fail."""
    choice = completion.choices[0] if completion.choices else None
    if choice is None or choice.finish_reason not in FAILED_FINISH:
        return None
    error = getattr(choice, "error", None)  # not in the SDK's model: kept as the JSON it came as
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return error
    return {"message": f'the answer ended with finish_reason "{choice.finish_reason}" before it was finished'}


def _is_error_body(body: object) -> bool:
    return isinstance(body, dict) or (isinstance(body, str) and bool(body.strip()))


def _error_message(error: dict) -> str:
    message = error.get("message")
    return message if isinstance(message, str) and message else "no message"


def _answered_error(exc: openai.APIError, api_key: str | None) -> LLMUnavailable:
    """An error object the endpoint answered with 200, whole or in its stream: its own message."""
    return answered_failure(exc, f"the model endpoint answered an error: {_endpoint_said(exc, api_key)}")


def _endpoint_said(exc: openai.APIError, api_key: str | None) -> str:
    """The endpoint's own message, cut short and without the API key, which some servers quote."""
    message = exc.message if isinstance(exc.message, str) else "no message"
    if isinstance(exc.body, str):  # a text body, or a stream's `{"error": "..."}`: the SDK gives it as body
        message = exc.body
    if api_key and len(api_key) >= 8:
        message = message.replace(api_key, "***")
    if len(message) > ERROR_MESSAGE_CHARS:
        message = message[:ERROR_MESSAGE_CHARS] + "..."
    return message


def _unavailable(exc: Exception, model: str, api_key: str | None = None) -> LLMUnavailable:
    if isinstance(exc, openai.APIStatusError):
        # The answer names the status only (the message may quote the prompt); the operator needs the
        # endpoint's words: a model id it does not know, credits spent, a parameter it refuses.
        log.warning(
            "the model endpoint refused the request",
            extra={"status": exc.status_code, "endpoint_message": _endpoint_said(exc, api_key)},
        )
        return status_failure(exc, model=model)
    if type(exc) is openai.APIError and _is_error_body(exc.body):  # an error object in a 200 answer
        return _answered_error(exc, api_key)
    if isinstance(exc, openai.APIConnectionError) and (failure := _connect_failure(exc)):
        return LLMUnavailable(f"the model endpoint {failure}: check LLM_BASE_URL")
    if isinstance(exc, openai.APITimeoutError):
        return LLMUnavailable("the model endpoint did not answer in time")
    return LLMUnavailable(f"the model endpoint is unreachable or unreadable ({type(exc).__name__})")


def _connect_failure(exc: openai.APIConnectionError) -> str | None:
    """Why no connection was made, when the cause says so. The SDK's aiohttp transport reports a refused
    connection and an unknown host as connect timeouts, which would send an operator after a slow model."""
    cause: BaseException | None = exc
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "refused the connection"
        if isinstance(cause, socket.gaierror):
            return f"host {exc.request.url.host} was not found"
        cause = cause.__cause__ or cause.__context__
    return None


def build_generator(settings: Settings) -> OpenAIGenerator:
    """The one place that decides between the configured endpoint and the offline generator."""
    policy = RetryPolicy(
        max_retries=settings.llm_max_retries, base_s=settings.llm_backoff_base_s, cap_s=settings.llm_backoff_cap_s,
        deadline_s=settings.llm_deadline_s,
    )
    if settings.offline:
        from services.chat.offline_llm.transport import OfflineTransport

        http_client = httpx2.AsyncClient(transport=OfflineTransport())
        client = AsyncOpenAI(
            base_url=OFFLINE_BASE_URL, api_key="offline", http_client=http_client,
            timeout=settings.llm_timeout_s, max_retries=0,
        )
        return OpenAIGenerator(client, policy=policy, deadline_s=settings.llm_deadline_s, offline=True)
    api_key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unused"
    # The SDK's aiohttp transport: the same hop choice as retrieval's and the gateway's clients
    # (docs/benchmarks.md, "Hops"); it took a completion from the offline generator from 2.4 to 1.8 ms p50.
    client = AsyncOpenAI(
        base_url=settings.llm_base_url, api_key=api_key, timeout=settings.llm_timeout_s, max_retries=0,
        http_client=DefaultAioHttpClient(),  # the SDK sets the timeout on every request
    )
    breaker = CircuitBreaker(
        name="llm", failure_threshold=settings.llm_breaker_failures, cooldown_s=settings.llm_breaker_cooldown_s
    )
    return OpenAIGenerator(client, policy=policy, deadline_s=settings.llm_deadline_s, breaker=breaker)
