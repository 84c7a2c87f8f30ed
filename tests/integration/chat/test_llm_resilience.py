"""The generation adapter over real HTTP against the LLM stand-in: retries, Retry-After, timeouts,
streaming, and a reader that leaves part way; and a stream from the built-in offline generator."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from prometheus_client import REGISTRY

from services.chat.adapters.generator import OpenAIGenerator, build_generator
from services.chat.errors import LLMContentFiltered, LLMContextExceeded, LLMRetryLater, LLMUnavailable
from services.chat.ports import Exchange, Generation
from services.chat.prompt import build_prompt
from services.chat.reformulation import HeuristicReformulator, LLMReformulator
from services.chat.settings import Settings
from tests.integration.chat.llm_stand_in import (
    ANSWER, CONTEXT_OVERFLOW, ERROR_IN_200, NO_CITATIONS, words_of,
)
from tests.support import free_port
from tests.unit.chat.fakes import GUIDE

pytestmark = pytest.mark.integration

MESSAGES = [{"role": "system", "content": "Passages: [1] cairn user add"}, {"role": "user", "content": "How?"}]


@asynccontextmanager
async def generator_for(model, **settings) -> AsyncIterator[OpenAIGenerator]:
    url, _ = model
    settings = {"llm_timeout_s": 5.0, **settings}
    generator = build_generator(
        Settings(llm_base_url=f"{url}/v1", llm_model="test-model", llm_backoff_base_s=0.05, **settings)
    )
    try:
        yield generator
    finally:
        await generator.close()


async def generate(generator: OpenAIGenerator) -> Generation:
    return await generator.generate(model="test-model", messages=MESSAGES, temperature=0.1, max_tokens=64)


def streamed(generator: OpenAIGenerator, model: str = "test-model", messages=MESSAGES) -> AsyncIterator:
    return generator.stream(model=model, messages=messages, temperature=0.1, max_tokens=512)


async def test_rate_limit_waits_the_retry_after_then_answers(model, script):
    script.reset(mode="rate_limit", failures=2, retry_after="1")
    async with generator_for(model) as generator:
        result = await generate(generator)
    assert result.text == ANSWER and len(script.calls) == 3
    gaps = [later.at - earlier.at for earlier, later in zip(script.calls, script.calls[1:])]
    assert all(0.95 <= gap < 2.5 for gap in gaps), gaps  # the backoff alone would be 0.05 and 0.1 s


async def test_server_errors_are_retried_until_an_answer(model, script):
    script.reset(mode="error", failures=3)
    async with generator_for(model, llm_max_retries=3) as generator:
        assert (await generate(generator)).text == ANSWER
    assert len(script.calls) == 4


async def test_lasting_server_errors_end_in_llm_unavailable_after_every_retry(model, script):
    script.reset(mode="error")
    async with generator_for(model, llm_max_retries=3) as generator:
        with pytest.raises(LLMUnavailable, match="500"):
            await generate(generator)
    assert len(script.calls) == 4


async def test_a_bad_request_is_not_retried(model, script):
    script.reset(mode="bad_request")
    async with generator_for(model) as generator:
        with pytest.raises(LLMUnavailable, match="400"):
            await generate(generator)
    assert len(script.calls) == 1


async def test_a_hanging_endpoint_times_out_on_every_attempt(model, script):
    script.reset(mode="hang")
    async with generator_for(model, llm_timeout_s=0.3, llm_max_retries=2) as generator:
        started = time.monotonic()
        with pytest.raises(LLMUnavailable, match="in time"):
            await generate(generator)
        elapsed = time.monotonic() - started
    assert len(script.calls) == 3
    # 3 × 0.3 s timeouts and ~0.15 s of backoff, with slack for a slow, busy CI machine; one attempt left to the
    # stand-in's hang (hang_s, 5 s) would take longer than the bound.
    assert 0.9 <= elapsed < 3.5, elapsed


@pytest.mark.parametrize(
    ("base_url", "says"),
    [
        (f"http://127.0.0.1:{free_port()}/v1", "refused the connection"),  # nothing listens there
        ("http://model.invalid/v1", "host model.invalid was not found"),  # .invalid never resolves (RFC 2606)
    ],
    ids=["refused", "unresolvable"],  # the same test names in every collection, whatever port was free
)
async def test_an_endpoint_that_cannot_be_reached_is_named_so_not_as_a_timeout(base_url, says):
    # A refused connection reached the SDK as a connect "timeout": operators read "did not answer in time"
    # and looked for a slow model where LLM_BASE_URL named the wrong port or host.
    generator = build_generator(
        Settings(llm_base_url=base_url, llm_model="test-model", llm_max_retries=1, llm_backoff_base_s=0.01)
    )
    try:
        with pytest.raises(LLMUnavailable) as caught:
            await generate(generator)
        with pytest.raises(LLMUnavailable) as caught_streaming:
            [item async for item in streamed(generator)]
    finally:
        await generator.close()
    for error in (caught.value, caught_streaming.value):
        assert says in error.message and "LLM_BASE_URL" in error.message and "in time" not in error.message


async def test_the_deadline_bounds_the_whole_request_across_retries(model, script):
    script.reset(mode="hang")
    # An attempt's own timeout (5 s) is far past the bound below: only the deadline can end these in time.
    async with generator_for(model, llm_timeout_s=5.0, llm_deadline_s=0.5) as generator:
        started = time.monotonic()
        with pytest.raises(LLMUnavailable, match="within 0.5 s"):
            await generate(generator)
        with pytest.raises(LLMUnavailable, match="no text within 0.5 s"):
            [item async for item in streamed(generator)]
        elapsed = time.monotonic() - started
    assert elapsed < 2 * 0.5 + 2.5, elapsed  # two deadlines, slack for a slow, busy CI machine; under one timeout


async def test_a_stream_yields_its_deltas_in_order_then_the_generation(model, script):
    script.reset(mode="stream")
    async with generator_for(model) as generator:
        items = [item async for item in streamed(generator)]
    assert items[:-1] == words_of(ANSWER)
    assert items[-1] == Generation(ANSWER, "test-model", 20, len(words_of(ANSWER)), "stop")
    assert script.calls[0].body["stream"] is True


async def test_a_rate_limited_stream_is_retried_before_its_first_delta(model, script):
    script.reset(mode="rate_limit", failures=1, retry_after="0")
    async with generator_for(model) as generator:
        items = [item async for item in streamed(generator)]
    assert "".join(items[:-1]) == ANSWER == items[-1].text and len(script.calls) == 2


async def read_two_deltas_then_leave(stream: AsyncIterator, how: str) -> list:
    """What the chat endpoint does when its HTTP client goes away: aclose() the stream, or cancel its task."""
    if how == "aclose":
        deltas = [await anext(stream), await anext(stream)]
        await stream.aclose()
        return deltas
    deltas: list = []
    two_read = asyncio.Event()

    async def read_all() -> None:
        async for item in stream:
            deltas.append(item)
            if len(deltas) == 2:
                two_read.set()

    task = asyncio.create_task(read_all())
    await asyncio.wait_for(two_read.wait(), 3.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return deltas[:2]


@pytest.mark.parametrize("how", ["aclose", "cancel"])
async def test_a_reader_that_leaves_early_disconnects_from_the_endpoint(model, script, how):
    script.reset(mode="slow_stream", slow_chunks=200, slow_delay_s=0.05)  # 10 s if read to the end
    async with generator_for(model) as generator:
        deltas = await read_two_deltas_then_leave(streamed(generator), how)
        left = time.monotonic()
        disconnected = await asyncio.to_thread(script.disconnected.wait, 4.0)
    assert deltas == ["word0 ", "word1 "]
    assert disconnected and not script.finished.is_set()
    assert time.monotonic() - left < 4.0  # the 198 words left would take another ~10 s: it did not read them


# What a wrong LLM_BASE_URL answers (a web UI's page, another API's JSON): the operator is told, once.
NOT_A_COMPLETION = {"html": "text/html", "wrong_json": "application/json", "broken_json": "application/json"}


@pytest.mark.parametrize("mode", NOT_A_COMPLETION)
async def test_a_body_that_is_not_a_completion_is_llm_unavailable_at_once(model, script, mode):
    script.reset(mode=mode)
    async with generator_for(model, llm_max_retries=3) as generator:
        with pytest.raises(LLMUnavailable) as caught:
            await generate(generator)
    assert caught.value.message == (
        f"the model endpoint answered 200 with {NOT_A_COMPLETION[mode]}, not a chat completion: check LLM_BASE_URL"
    )
    assert len(script.calls) == 1  # the same URL gives the same page: no retry


@pytest.mark.parametrize("mode", [*NOT_A_COMPLETION, "wrong_chunks"])
async def test_a_stream_that_is_not_chunks_is_llm_unavailable_before_any_delta(model, script, mode):
    script.reset(mode=mode)
    items = []
    async with generator_for(model, llm_max_retries=3) as generator:
        with pytest.raises(LLMUnavailable) as caught:
            async for item in streamed(generator):
                items.append(item)
    content_type = NOT_A_COMPLETION.get(mode, "text/event-stream")
    assert caught.value.message == (
        f"the model endpoint answered 200 with {content_type}, not a stream of chat completion chunks: "
        "check LLM_BASE_URL"
    )
    assert items == [] and len(script.calls) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_an_error_answered_with_200_is_named_with_its_own_message(model, script, stream):
    script.reset(mode="error_in_200")
    async with generator_for(model, llm_api_key="sk-test-secret-key") as generator:
        with pytest.raises(LLMUnavailable) as caught:
            if stream:
                async for _ in streamed(generator):
                    pass
            else:
                await generate(generator)
    message = caught.value.message
    assert message.startswith("the model endpoint answered an error: upstream model overloaded for key ***; try later")
    assert "sk-test-secret-key" not in message and message.endswith("...") and len(message) < 260


# Errors that proxies (LiteLLM, OpenRouter, vLLM and Ollama gateways) answer with 200, whole or as a stream's
# event, saying in their own fields that the endpoint, not the request, failed.
TRANSIENT_IN_200 = {
    "server_error": ERROR_IN_200,
    "code_as_text": {"message": "upstream connection failed", "type": None, "param": None, "code": "502"},
    "rate_limited": {"message": "Rate limit exceeded: free-models-per-min", "code": 429, "metadata": {}},
    "type_only": {"message": "the model is overloaded", "type": "overloaded_error"},
}
# ... and errors that say the request is at fault, or say neither: the same request would fail again.
REFUSED_IN_200 = {
    "invalid_request": {"message": "max_tokens is too large", "type": "invalid_request_error", "code": None},
    "status_400": {"object": "error", "message": "unsupported parameter", "type": "BadRequestError", "code": 400},
    "unknown": {"message": "something went wrong"},
}


def retries_counted(reason: str) -> float:
    return REGISTRY.get_sample_value("cairn_llm_retries_total", {"reason": reason}) or 0.0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("error", TRANSIENT_IN_200)
async def test_a_transient_error_answered_with_200_is_retried_until_an_answer(model, script, error, stream):
    script.reset(mode="error_in_200", failures=2, answered_error=TRANSIENT_IN_200[error])
    counted = retries_counted("APIError")
    async with generator_for(model, llm_max_retries=3) as generator:
        if stream:
            text = "".join([item async for item in streamed(generator)][:-1])
        else:
            text = (await generate(generator)).text
    assert text == ANSWER and len(script.calls) == 3
    assert retries_counted("APIError") - counted == 2


@pytest.mark.parametrize("error", REFUSED_IN_200)
async def test_an_error_answered_with_200_that_refuses_the_request_is_not_retried_nor_held_against_the_model(
    model, script, error
):
    script.reset(mode="error_in_200", answered_error=REFUSED_IN_200[error])
    breaker = {"llm_breaker_failures": 1, "llm_breaker_cooldown_s": 30, "llm_max_retries": 3}
    async with generator_for(model, **breaker) as generator:
        caught, caught_streaming = await raised_both_ways(generator, LLMUnavailable)
    for failure in (caught.value, caught_streaming.value):
        assert failure.status_code == 502 and failure.message.startswith("the model endpoint answered an error: ")
    assert len(script.calls) == 2  # one call each: not retried, and the breaker stayed closed


@pytest.mark.parametrize("server", ["vllm", "openai", "llama.cpp"])
async def test_a_context_overflow_answered_with_200_is_named_so_and_not_retried(model, script, server):
    error = OVERFLOWS[server]["error"] if OVERFLOWS[server] else CONTEXT_OVERFLOW
    script.reset(mode="error_in_200", answered_error=error)
    async with generator_for(model, llm_max_retries=3) as generator:
        caught, _ = await raised_both_ways(generator, LLMContextExceeded)
    assert caught.value.status_code == 500 and "CONTEXT_TOKEN_BUDGET" in caught.value.message
    assert len(script.calls) == 2


async def test_an_error_answered_with_200_as_bare_text_is_named_with_it(model, script):
    # {"error": "..."}: a message with no object around it, as some servers and proxies send it.
    script.reset(mode="error_in_200", answered_error="model qwen-72b is not loaded on this node")
    async with generator_for(model, llm_max_retries=1) as generator:
        caught, caught_streaming = await raised_both_ways(generator, LLMUnavailable)
    for error in (caught.value, caught_streaming.value):
        assert error.status_code == 502
        assert error.message == "the model endpoint answered an error: model qwen-72b is not loaded on this node"
    assert len(script.calls) == 2  # named no status: not retried, as before


async def test_a_rate_limit_answered_with_200_is_503_after_the_retries(model, script):
    script.reset(mode="error_in_200", answered_error=TRANSIENT_IN_200["rate_limited"])
    async with generator_for(model, llm_max_retries=1) as generator:
        caught, caught_streaming = await raised_both_ways(generator, LLMUnavailable)
    for error in (caught.value, caught_streaming.value):
        assert error.status_code == 503 and error.headers() == {"Retry-After": "5"}  # it named no wait
        assert error.message == "the model endpoint answered an error: Rate limit exceeded: free-models-per-min"
    assert len(script.calls) == 4


async def collect(stream: AsyncIterator) -> list:
    return [item async for item in stream]


@pytest.mark.parametrize("stream", [False, True])
async def test_the_breaker_opens_on_transient_errors_answered_with_200(model, script, stream):
    script.reset(mode="error_in_200")
    breaker = {"llm_breaker_failures": 2, "llm_breaker_cooldown_s": 30, "llm_max_retries": 0}
    async with generator_for(model, **breaker) as generator:
        for _ in range(2):
            with pytest.raises(LLMUnavailable, match="answered an error"):
                await (collect(streamed(generator)) if stream else generate(generator))
        with pytest.raises(LLMRetryLater, match="paused while it recovers"):
            await (collect(streamed(generator)) if stream else generate(generator))
    assert len(script.calls) == 2


async def test_a_stream_broken_after_its_first_deltas_fails_without_a_retry(model, script):
    script.reset(mode="broken_stream")
    items = []
    async with generator_for(model, llm_max_retries=3) as generator:
        with pytest.raises(LLMUnavailable, match="broke off part way"):
            async for item in streamed(generator):
                items.append(item)
    assert items == words_of(ANSWER)[:3] and len(script.calls) == 1


@pytest.mark.parametrize("mode", [*NOT_A_COMPLETION, "error"])
async def test_the_reformulator_falls_back_to_the_heuristic_when_the_body_is_not_a_completion(
    model, script, mode, caplog
):
    script.reset(mode=mode)
    history = [Exchange(question="How are they stored?", standalone="How are login sessions stored?", answer="In Redis.")]
    expected = await HeuristicReformulator().reformulate(query="and its TTL?", history=history, model="test-model")
    async with generator_for(model, llm_max_retries=0) as generator:
        rewriter = LLMReformulator(generator, mode="followups")
        assert await rewriter.reformulate(query="and its TTL?", history=history, model="test-model") == expected
    assert expected == "What about the TTL of login sessions?" and len(script.calls) == 1
    assert "query reformulation failed, using the heuristic" in caplog.text


async def test_the_stand_in_answers_health_models_and_uncited_text(model, script):
    url, _ = model
    script.reset(mode="no_citations")
    async with httpx.AsyncClient(base_url=url) as client:
        health, models = await client.get("/healthz"), await client.get("/v1/models")
    async with generator_for(model) as generator:
        assert await generator.ping()
        result = await generate(generator)
    assert health.status_code == models.status_code == 200
    assert result.text == NO_CITATIONS and "[" not in result.text


async def test_the_offline_generator_streams_deltas_then_the_generation():
    generator = build_generator(Settings())
    prompt = build_prompt(query="How do I add a user?", chunks=GUIDE, token_budget=3500)
    try:
        items = [item async for item in streamed(generator, "cairn-extractive", prompt.messages)]
    finally:
        await generator.close()
    *deltas, generation = items
    assert len(deltas) > 3 and all(isinstance(d, str) and d for d in deltas)
    assert isinstance(generation, Generation) and generation.text == "".join(deltas)
    assert generation.model == "cairn-extractive" and generation.finish_reason == "stop"
    assert generation.prompt_tokens > 0 and generation.completion_tokens > 0


# How servers refuse a prompt over the model's context window: vLLM (the stand-in's default), OpenAI and
# Azure, llama.cpp's server. Never retried as it is: the same prompt gets the same answer.
OVERFLOWS = {
    "vllm": None,
    "openai": {"error": {"message": "Please reduce the length of the messages.", "type": "invalid_request_error",
                         "param": "messages", "code": "context_length_exceeded"}},
    "llama.cpp": {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it",
                            "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}},
}


async def raised_both_ways(generator, error: type[Exception]):
    """The errors a plain and then a streamed generation raised, each required to be an `error`."""
    with pytest.raises(error) as plain:
        await generate(generator)
    with pytest.raises(error) as streaming:
        [item async for item in streamed(generator)]
    return plain, streaming


@pytest.mark.parametrize("server", OVERFLOWS)
async def test_a_prompt_over_the_context_window_is_named_so_and_not_retried(model, script, server):
    script.reset(mode="small_context", context_chars=10)
    if OVERFLOWS[server]:
        script.overflow = OVERFLOWS[server]
    async with generator_for(model, llm_max_retries=3) as generator:
        caught, _ = await raised_both_ways(generator, LLMContextExceeded)
    assert caught.value.status_code == 500 and caught.value.code == "llm_context_exceeded"
    assert "CONTEXT_TOKEN_BUDGET" in caught.value.message and len(script.calls) == 2


async def test_a_model_that_keeps_rate_limiting_is_503_with_its_retry_after(model, script):
    script.reset(mode="rate_limit", retry_after="0.2")
    async with generator_for(model, llm_max_retries=1) as generator:
        with pytest.raises(LLMUnavailable) as caught:
            await generate(generator)
    assert caught.value.status_code == 503 and caught.value.headers() == {"Retry-After": "1"}
    assert caught.value.code == "llm_unavailable" and len(script.calls) == 2


@pytest.mark.parametrize(
    ("limits", "retry_after"),
    [({"llm_backoff_cap_s": 0.1}, "2"), ({"llm_deadline_s": 2.0}, "3")],
    ids=["over-the-cap", "over-the-deadline"],
)
async def test_a_retry_after_longer_than_chat_may_wait_is_503_at_once(model, script, limits, retry_after):
    # Retrying before the wait asked for is likely refused again, and adds load to an endpoint shedding it.
    script.reset(mode="rate_limit", retry_after=retry_after)
    async with generator_for(model, llm_max_retries=3, **limits) as generator:
        started = time.monotonic()
        caught, caught_streaming = await raised_both_ways(generator, LLMUnavailable)
        elapsed = time.monotonic() - started
    for error in (caught.value, caught_streaming.value):
        assert error.status_code == 503 and error.headers() == {"Retry-After": retry_after}
    # One call each, no wait: waiting out the Retry-After even once would take longer than the bound.
    assert len(script.calls) == 2 and elapsed < float(retry_after), elapsed


async def test_a_server_error_with_a_long_retry_after_is_503_at_once_with_it(model, script):
    # An overloaded server's 503 that says when it will answer again: the client is told that wait, as for a 429.
    script.reset(mode="overloaded", retry_after="30")
    async with generator_for(model, llm_max_retries=3) as generator:
        caught, caught_streaming = await raised_both_ways(generator, LLMUnavailable)
    for error in (caught.value, caught_streaming.value):
        assert error.status_code == 503 and error.headers() == {"Retry-After": "30"}
        assert error.code == "llm_unavailable" and "503" in error.message
    assert len(script.calls) == 2  # one call each, not retried sooner than asked


async def test_a_server_error_without_a_retry_after_stays_502(model, script):
    script.reset(mode="error", failures=2)
    async with generator_for(model, llm_max_retries=1) as generator:
        with pytest.raises(LLMUnavailable) as caught:
            await generate(generator)
    assert caught.value.status_code == 502 and caught.value.headers() is None


async def test_a_prompt_the_content_filter_refused_is_named_so_and_not_retried(model, script):
    script.reset(mode="prompt_filtered")
    async with generator_for(model, llm_max_retries=3) as generator:
        caught, _ = await raised_both_ways(generator, LLMContentFiltered)
    assert caught.value.status_code == 422 and caught.value.code == "llm_content_filtered"
    assert "content filter" in caught.value.message and len(script.calls) == 2


async def test_a_choice_without_a_message_is_an_answer_without_text(model, script):
    script.reset(mode="no_message")
    async with generator_for(model, llm_max_retries=3) as generator:
        result = await generate(generator)
    assert (result.text, result.finish_reason) == ("", "stop") and len(script.calls) == 1


async def test_an_answer_the_content_filter_withheld_keeps_its_finish_reason(model, script):
    script.reset(mode="content_filter")
    async with generator_for(model) as generator:
        result = await generate(generator)
        items = [item async for item in streamed(generator)]
    assert (result.text, result.finish_reason) == ("", "content_filter")
    assert len(items) == 1 and (items[0].text, items[0].finish_reason) == ("", "content_filter")


async def test_a_refused_api_key_is_named_at_once_and_the_endpoint_is_not_ready(model, script):
    script.reset(mode="unauthorized")
    async with generator_for(model, llm_max_retries=3) as generator:
        with pytest.raises(LLMUnavailable, match="check LLM_API_KEY") as caught:
            await generate(generator)
        assert await generator.ping() is False
    assert caught.value.status_code == 502 and len(script.calls) == 1


async def test_the_breaker_opens_after_failures_in_a_row_and_lets_a_trial_through(model, script):
    script.reset(mode="error")
    breaker = {"llm_breaker_failures": 2, "llm_breaker_cooldown_s": 0.5, "llm_max_retries": 1}
    async with generator_for(model, **breaker) as generator:
        for _ in range(2):
            with pytest.raises(LLMUnavailable, match="answered 500"):
                await generate(generator)
        assert len(script.calls) == 4  # each of the two questions: a call and its retry
        with pytest.raises(LLMUnavailable) as paused:
            await generate(generator)
        with pytest.raises(LLMUnavailable, match="paused"):
            [item async for item in streamed(generator)]
        assert len(script.calls) == 4  # failed at once, the endpoint left alone
        assert paused.value.status_code == 503 and paused.value.headers() == {"Retry-After": "1"}
        assert paused.value.message == "the model endpoint is failing; calls are paused while it recovers"
        await asyncio.sleep(0.55)
        script.reset(mode="answer")
        assert (await generate(generator)).text == ANSWER  # the trial, which closes the breaker
        assert "".join([item async for item in streamed(generator)][:-1]) == ANSWER


async def test_a_refused_request_does_not_count_towards_the_breaker(model, script):
    breaker = {"llm_breaker_failures": 1, "llm_breaker_cooldown_s": 30, "llm_max_retries": 0}
    async with generator_for(model, **breaker) as generator:
        for mode in ("unauthorized", "bad_request", "small_context"):
            script.reset(mode=mode, context_chars=10)
            with pytest.raises(LLMUnavailable) as caught:
                await generate(generator)
            assert caught.value.status_code != 503 and len(script.calls) == 1
