"""The SDK adapter and its retry policy against an endpoint simulated with httpx2's mock transport."""
import email.utils
import json
import logging

import httpx2
import pytest
from openai import AsyncOpenAI
from prometheus_client import REGISTRY

from services.chat.adapters.generator import OpenAIGenerator, build_generator
from services.chat.adapters.llm_retry import RetryPolicy, retry_after_s, retry_delay
from services.chat.errors import LLMContentFiltered, LLMUnavailable
from services.chat.ports import Generation
from services.chat.settings import Settings
from tests.support import free_port

pytestmark = pytest.mark.unit

MESSAGES = [{"role": "system", "content": "ctx"}, {"role": "user", "content": "q"}]
COMPLETION = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "vendor-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Yes [1]."}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
}
OK = httpx2.Response(200, json=COMPLETION)
NOW = 1_700_000_000.0


# --- the delay before a retry ---------------------------------------------------------------------

def test_backoff_doubles_from_the_base_up_to_the_cap():
    delays = [retry_delay(n, base_s=1.0, cap_s=10.0) for n in range(1, 7)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert retry_delay(1000, base_s=1.0, cap_s=10.0) == 10.0


def test_jitter_adds_between_0_and_25_percent():
    assert retry_delay(2, base_s=1.0, cap_s=10.0, jitter=0.0) == 2.0
    assert retry_delay(2, base_s=1.0, cap_s=10.0, jitter=0.5) == 2.25
    assert retry_delay(9, base_s=1.0, cap_s=10.0, jitter=0.999) == pytest.approx(12.4975)


async def test_the_policy_draws_jitter_within_bounds():
    for draw in (0.0, 0.3, 0.999):
        sleeps = await sleeps_before_success(httpx2.Response(500), random=lambda d=draw: d)
        assert sleeps == [pytest.approx(0.1 * (1 + 0.25 * draw))]


def test_retry_after_in_seconds_milliseconds_or_as_a_date():
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "0.5"}) == 0.5
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    date = email.utils.formatdate(NOW + 7, usegmt=True)
    assert retry_after_s({"retry-after": date}, now=lambda: NOW) == 7.0
    assert retry_after_s(httpx2.Headers({"Retry-After": "4"})) == 4.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({"retry-after": "nan"}) is None
    assert retry_after_s({}) is None


def test_retry_after_replaces_the_backoff_within_zero_and_the_cap():
    assert retry_delay(1, base_s=1.0, cap_s=10.0, retry_after=3.0, jitter=0.9) == 3.0
    assert retry_delay(1, base_s=1.0, cap_s=10.0, retry_after=120.0) == 10.0
    assert retry_delay(3, base_s=1.0, cap_s=10.0, retry_after=-5.0) == 0.0  # a date already past


def test_policy_and_generator_check_their_arguments():
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError):
        retry_delay(0, base_s=1.0, cap_s=10.0)
    with pytest.raises(ValueError, match="max_retries=0"):
        OpenAIGenerator(AsyncOpenAI(base_url="http://llm.test/v1", api_key="k", max_retries=2))


# --- which failures are retried -------------------------------------------------------------------

class Recorder:
    """The sleeps the policy asked for, without sleeping."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def generator_answering(*responses, max_retries: int = 3, random=lambda: 0.0) -> tuple[OpenAIGenerator, list, list]:
    """A generator whose endpoint gives `responses` in turn (the last one again and again); an exception
    instance is raised as the transport failure it is."""
    seen: list[httpx2.Request] = []
    queue = list(responses)
    recorder = Recorder()

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    client = AsyncOpenAI(
        base_url="http://llm.test/v1",
        api_key="sk-secret-key",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    policy = RetryPolicy(max_retries=max_retries, base_s=0.1, cap_s=1.0, sleep=recorder.sleep, random=random)
    return OpenAIGenerator(client, policy=policy), seen, recorder.sleeps


async def generate(generator: OpenAIGenerator) -> Generation:
    return await generator.generate(model="vendor-model", messages=MESSAGES, temperature=0.1, max_tokens=64)


async def sleeps_before_success(failure, **kwargs) -> list[float]:
    generator, seen, sleeps = generator_answering(failure, OK, **kwargs)
    assert (await generate(generator)).text == "Yes [1]." and len(seen) == 2
    return sleeps


async def test_collects_text_usage_and_finish_reason():
    generator, seen, _ = generator_answering(OK)
    result = await generate(generator)
    assert (result.text, result.model, result.prompt_tokens, result.completion_tokens, result.finish_reason) == (
        "Yes [1].", "vendor-model", 11, 3, "stop"
    )
    assert seen[0].url.path == "/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-secret-key"
    assert json.loads(seen[0].content) == {
        "model": "vendor-model", "messages": MESSAGES, "temperature": 0.1, "max_tokens": 64
    }


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_client_errors_fail_at_once(status):
    generator, seen, sleeps = generator_answering(httpx2.Response(status, json={"error": {"message": "no"}}))
    with pytest.raises(LLMUnavailable) as caught:
        await generate(generator)
    assert len(seen) == 1 and sleeps == []
    assert caught.value.status_code == 502 and caught.value.body()["error"] == "llm_unavailable"


@pytest.mark.parametrize(
    "status,message",
    [(401, "the model endpoint refused the API key (401): check LLM_API_KEY"),
     (403, "the model endpoint denied access (403): check that LLM_API_KEY may use the model")],
)
async def test_a_refused_key_or_access_says_which_setting_to_check(status, message):
    generator, _, _ = generator_answering(httpx2.Response(status, json={"error": {"message": "no"}}))
    with pytest.raises(LLMUnavailable) as caught:
        await generate(generator)
    assert (caught.value.status_code, caught.value.message) == (502, message)


async def test_a_404_names_the_model_asked_for_as_chat_models_may_have_chosen_it():
    # It named LLM_MODEL alone, though the caller's model_id (CHAT_MODELS) may be the one the endpoint lacks.
    generator, _, _ = generator_answering(httpx2.Response(404, json={"error": {"message": "model not found"}}))
    with pytest.raises(LLMUnavailable) as caught:
        await generate(generator)
    assert caught.value.message == (
        "the model endpoint answered 404: check LLM_BASE_URL and that it serves the model 'vendor-model' "
        "(LLM_MODEL or CHAT_MODELS)"
    )


@pytest.mark.parametrize(
    "failure",
    [
        httpx2.Response(429, json={"error": {"message": "slow down"}}),
        httpx2.Response(500, json={"error": {"message": "boom"}}),
        httpx2.Response(503),
        httpx2.ReadTimeout("too slow"),
        httpx2.ConnectError("refused"),
        httpx2.RemoteProtocolError("connection reset"),
    ],
    ids=["429", "500", "503", "timeout", "connect", "reset"],
)
async def test_transient_failures_are_retried_after_the_backoff(failure):
    assert await sleeps_before_success(failure) == [0.1]


async def test_retry_after_is_waited_instead_of_the_backoff():
    limited = httpx2.Response(429, headers={"retry-after": "0.7"}, json={"error": {"message": "slow down"}})
    assert await sleeps_before_success(limited) == [0.7]
    limited_ms = httpx2.Response(429, headers={"retry-after-ms": "250"})
    assert await sleeps_before_success(limited_ms) == [0.25]


async def test_the_last_failure_after_every_retry_is_llm_unavailable():
    generator, seen, sleeps = generator_answering(httpx2.Response(500), max_retries=3)
    with pytest.raises(LLMUnavailable, match="500"):
        await generate(generator)
    assert len(seen) == 4
    assert sleeps == [0.1, 0.2, 0.4]


async def test_each_retry_logs_one_warning_without_the_key(caplog):
    generator, _, _ = generator_answering(httpx2.Response(429), OK)
    with caplog.at_level(logging.WARNING, logger="services.chat.adapters.llm_retry"):
        await generate(generator)
    [record] = caplog.records
    assert "status=429" in record.getMessage() and "attempt=1" in record.getMessage()
    assert (record.status, record.attempt, record.delay_s) == (429, 1, 0.1)
    assert "sk-secret-key" not in caplog.text


@pytest.mark.parametrize(
    ("refusal", "said"),
    [
        (httpx2.Response(400, json={"error": {"message": "vendor/x is not a valid model ID (key sk-secret-key)"}}),
         "Error code: 400 - vendor/x is not a valid model ID (key ***)"),
        (httpx2.Response(402, json={"error": {"message": "Insufficient credits", "code": 402}}),
         "Error code: 402 - Insufficient credits"),
        (httpx2.Response(400, text="x" * 500), "x" * 200 + "..."),
    ],
    ids=["model id", "credits", "long text"],
)
async def test_a_refusal_the_answer_does_not_quote_is_logged_for_the_operator_without_the_key(refusal, said, caplog):
    # The client hears only "answered 400": the endpoint's own words, which may quote the prompt, go to the
    # log, else the operator has nothing to act on (OpenRouter's bad model id, spent credits, a bad parameter).
    generator, _, _ = generator_answering(refusal)
    with caplog.at_level(logging.WARNING, logger="services.chat.adapters.generator"):
        with pytest.raises(LLMUnavailable) as caught:
            await generate(generator)
    assert caught.value.message == f"the model endpoint answered {refusal.status_code}"
    [record] = caplog.records
    assert record.getMessage() == "the model endpoint refused the request"
    assert (record.status, record.endpoint_message) == (refusal.status_code, said)
    assert "sk-secret-key" not in caplog.text


async def test_unreachable_endpoint_becomes_llm_unavailable_and_not_ready():
    settings = Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_model="m", llm_max_retries=0)
    generator = build_generator(settings)
    try:
        with pytest.raises(LLMUnavailable):
            await generator.generate(model="m", messages=MESSAGES, temperature=0, max_tokens=8)
        assert await generator.ping() is False
    finally:
        await generator.close()


@pytest.mark.parametrize(
    "body",
    [[COMPLETION], "a string", {"choices": "x"}, {"choices": ["x"]}, {"choices": [{"message": {"content": 5}}]},
     {**COMPLETION, "model": 7}],
    ids=["list", "string", "choices-string", "choice-string", "content-number", "model-number"],
)
async def test_json_of_another_shape_is_llm_unavailable_without_a_retry(body):
    generator, seen, sleeps = generator_answering(httpx2.Response(200, json=body))
    with pytest.raises(LLMUnavailable, match="answered 200 with application/json, not a chat completion"):
        await generate(generator)
    assert len(seen) == 1 and sleeps == []


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        ({"code": 503, "type": "server_error"}, True), ({"code": "502"}, True), ({"status": 429}, True),
        ({"type": "server_error", "code": None}, True), ({"type": "InternalServerError"}, True),
        ({"code": "rate_limit_exceeded", "type": "requests"}, True), ({"status": "UNAVAILABLE"}, True),
        ({"code": 400, "type": "server_error"}, False),  # the number it names comes first
        ({"type": "invalid_request_error"}, False), ({"code": "invalid_api_key"}, False), ({"code": 404}, False),
        ({}, False), ({"type": "some_error"}, False), ({"code": 1302}, False), ({"code": True}, False),
    ],
    ids=lambda value: json.dumps(value) if isinstance(value, dict) else str(value),
)
async def test_an_error_answered_with_200_is_retried_when_its_own_fields_name_a_transient_failure(error, retried):
    generator, seen, sleeps = generator_answering(httpx2.Response(200, json={"error": {"message": "m", **error}}), OK)
    if retried:
        assert (await generate(generator)).text == "Yes [1]." and len(seen) == 2 and sleeps == [0.1]
    else:
        with pytest.raises(LLMUnavailable, match="^the model endpoint answered an error: m$"):
            await generate(generator)
        assert len(seen) == 1 and sleeps == []


async def test_an_error_answered_with_200_that_names_a_refused_prompt_is_mapped_as_its_400():
    filtered = {"error": {"message": "The response was filtered", "code": "content_filter", "status": 400}}
    generator, seen, sleeps = generator_answering(httpx2.Response(200, json=filtered))
    with pytest.raises(LLMContentFiltered):
        await generate(generator)
    assert len(seen) == 1 and sleeps == []


def ended_in_error(**choice) -> httpx2.Response:
    """OpenRouter's answer when the model failed after it began: 200, finish_reason "error", the text so far."""
    cut = {"index": 0, "message": {"role": "assistant", "content": "Yes"}, "finish_reason": "error", **choice}
    return httpx2.Response(200, json={**COMPLETION, "choices": [cut]})


async def test_an_answer_that_ended_in_an_error_is_retried_as_the_error_it_names():
    provider_down = ended_in_error(error={"code": 502, "message": "Provider disconnected"})
    generator, seen, sleeps = generator_answering(provider_down, OK)
    assert (await generate(generator)).text == "Yes [1]." and len(seen) == 2 and sleeps == [0.1]
    generator, seen, _ = generator_answering(provider_down)
    with pytest.raises(LLMUnavailable, match="^the model endpoint answered an error: Provider disconnected$"):
        await generate(generator)
    assert len(seen) == 4


@pytest.mark.parametrize("finish_reason", ["error", "abort"])
async def test_an_answer_that_ended_in_an_error_naming_none_is_llm_unavailable_not_a_complete_answer(finish_reason):
    generator, seen, _ = generator_answering(ended_in_error(finish_reason=finish_reason))
    with pytest.raises(LLMUnavailable, match=f'finish_reason "{finish_reason}"'):
        await generate(generator)
    assert len(seen) == 1


async def test_usage_of_another_shape_counts_no_tokens_and_keeps_the_answer():
    generator, _, _ = generator_answering(httpx2.Response(200, json={**COMPLETION, "usage": {"input_tokens": 9}}))
    result = await generate(generator)
    assert (result.text, result.prompt_tokens, result.completion_tokens) == ("Yes [1].", 0, 0)


async def test_an_endpoint_without_a_models_route_still_counts_as_ready():
    generator, _, _ = generator_answering(httpx2.Response(404, json={"error": {"message": "no such route"}}))
    assert await generator.ping() is True


# --- streaming ------------------------------------------------------------------------------------

def sse(*deltas: str, usage: bool = True) -> list[bytes]:
    head = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "vendor-model"}

    def event(choices, **extra) -> bytes:
        return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n".encode()

    events = [event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    events += [event([{"index": 0, "delta": {"content": d}, "finish_reason": None}]) for d in deltas]
    events.append(event([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    if usage:
        events.append(event([], usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}))
    return [*events, b"data: [DONE]\n\n"]


class Body(httpx2.AsyncByteStream):
    """A response body sent event by event; it can break after `break_after` events and records aclose()."""

    def __init__(self, events: list[bytes], *, break_after: int | None = None) -> None:
        self.events, self.break_after, self.closed = events, break_after, False

    async def __aiter__(self):
        for sent, event in enumerate(self.events):
            if sent == self.break_after:
                raise httpx2.ReadError("connection reset")
            yield event

    async def aclose(self) -> None:
        self.closed = True


def streamed(body: Body) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)


async def collect(generator: OpenAIGenerator, *, stop_after: int | None = None) -> list:
    items = []
    stream = generator.stream(model="vendor-model", messages=MESSAGES, temperature=0.1, max_tokens=64)
    async for item in stream:
        items.append(item)
        if len(items) == stop_after:
            await stream.aclose()
            break
    return items


async def test_stream_yields_deltas_then_one_generation():
    generator, seen, _ = generator_answering(streamed(Body(sse("Yes", " [1]", "."))))
    items = await collect(generator)
    assert items == ["Yes", " [1]", ".", Generation("Yes [1].", "vendor-model", 11, 3, "stop")]
    assert seen[0].url.path == "/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-secret-key"
    assert json.loads(seen[0].content) == {
        "model": "vendor-model", "messages": MESSAGES, "temperature": 0.1, "max_tokens": 64,
        "stream": True, "stream_options": {"include_usage": True},
    }


async def test_stream_without_usage_reports_zero_tokens():
    generator, _, _ = generator_answering(streamed(Body(sse("Yes", usage=False))))
    assert (await collect(generator))[-1] == Generation("Yes", "vendor-model", 0, 0, "stop")


async def test_stream_is_retried_until_its_first_delta():
    broken_early = Body(sse("Yes", " [1]."), break_after=1)  # only the role chunk got through
    generator, seen, sleeps = generator_answering(
        httpx2.Response(429), streamed(broken_early), streamed(Body(sse("Yes", " [1].")))
    )
    items = await collect(generator)
    assert items[:-1] == ["Yes", " [1]."] and items[-1].text == "Yes [1]."
    assert len(seen) == 3 and sleeps == [0.1, 0.2] and broken_early.closed


async def test_stream_broken_after_a_delta_fails_at_once():
    generator, seen, sleeps = generator_answering(streamed(Body(sse("Yes", " [1]", "."), break_after=3)))
    items = []
    with pytest.raises(LLMUnavailable):
        async for item in generator.stream(model="m", messages=MESSAGES, temperature=0, max_tokens=8):
            items.append(item)
    assert items == ["Yes", " [1]"] and len(seen) == 1 and sleeps == []


async def test_stream_that_ends_without_a_finish_reason_is_llm_unavailable():
    """The server closed the stream cleanly (even with [DONE]) before the model had finished its answer."""
    cut = [event for event in sse("Yes", " [1]", ".", usage=False) if b'"finish_reason": "stop"' not in event]
    generator, _, _ = generator_answering(streamed(Body(cut)))
    items = []
    with pytest.raises(LLMUnavailable, match="broke off"):
        async for item in generator.stream(model="m", messages=MESSAGES, temperature=0, max_tokens=8):
            items.append(item)
    assert items == ["Yes", " [1]", "."]


async def test_stream_that_ends_with_finish_reason_error_is_llm_unavailable():
    """OpenRouter's chunk for a model that failed part way, when it carries the error in its choice alone."""
    cut = [event.replace(b'"finish_reason": "stop"', b'"finish_reason": "error"') for event in sse("Yes", " [1]")]
    generator, _, _ = generator_answering(streamed(Body(cut)))
    items = []
    with pytest.raises(LLMUnavailable, match="broke off"):
        async for item in generator.stream(model="m", messages=MESSAGES, temperature=0, max_tokens=8):
            items.append(item)
    assert items == ["Yes", " [1]"]


async def test_stream_failing_before_any_delta_after_every_retry_is_llm_unavailable():
    generator, seen, _ = generator_answering(httpx2.Response(503), max_retries=2)
    with pytest.raises(LLMUnavailable, match="503"):
        await collect(generator)
    assert len(seen) == 3


@pytest.mark.parametrize(
    "events",
    [[b"data: <p>not json</p>\n\n"], [b'data: ["x"]\n\n'], [b'data: {"choices": [{"delta": "x"}]}\n\n'],
     [b"data: [DONE]\n\n"]],
    ids=["not-json", "list", "delta-string", "done-only"],
)
async def test_a_stream_that_is_not_chunks_is_llm_unavailable_without_a_retry(events):
    body = Body(events)
    generator, seen, sleeps = generator_answering(streamed(body))
    with pytest.raises(LLMUnavailable, match="with text/event-stream, not a stream of chat completion chunks"):
        await collect(generator)
    assert len(seen) == 1 and sleeps == [] and body.closed


async def test_a_stream_chunk_without_a_delta_is_read_as_no_text():
    last = b'data: {"choices": [{"index": 0, "finish_reason": "stop"}]}\n\n'
    generator, _, _ = generator_answering(streamed(Body([*sse("Yes", usage=False)[:-2], last])))
    items = await collect(generator)
    assert items == ["Yes", Generation("Yes", "vendor-model", 0, 0, "stop")]


async def test_closing_the_stream_early_closes_the_response():
    body = Body(sse("one", " two", " three", " four"))
    generator, _, _ = generator_answering(streamed(body))
    assert await collect(generator, stop_after=2) == ["one", " two"]
    assert body.closed


def _tokens_counted(model: str) -> float:
    return sum(
        REGISTRY.get_sample_value("cairn_llm_tokens_total", {"model": model, "kind": kind}) or 0
        for kind in ("prompt", "completion")
    )


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_tokens_are_counted_under_the_model_asked_for_not_the_name_the_endpoint_answers_with(stream):
    # An endpoint names a dated snapshot or adds a provider's prefix: each name would be a series of its own.
    snapshot = {**COMPLETION, "model": "vendor-model-2025-06-01"}
    answer = streamed(Body([line.replace(b"vendor-model", b"vendor-model-2025-06-01") for line in sse("Yes")]))
    generator, _, _ = generator_answering(answer if stream else httpx2.Response(200, json=snapshot))
    before = _tokens_counted("vendor-model")
    if stream:
        [part async for part in generator.stream(model="vendor-model", messages=MESSAGES, temperature=0.1, max_tokens=64)]
    else:
        await generate(generator)
    assert _tokens_counted("vendor-model") > before
    assert _tokens_counted("vendor-model-2025-06-01") == 0
