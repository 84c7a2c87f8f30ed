"""The SDK adapter against an external endpoint, simulated with httpx2's mock transport."""
import httpx2
import pytest
from openai import AsyncOpenAI

from services.chat.adapters.generator import OpenAIGenerator, build_generator
from services.chat.errors import LLMUnavailable
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


def generator_answering(*responses: httpx2.Response, max_retries: int = 0) -> tuple[OpenAIGenerator, list]:
    seen: list[httpx2.Request] = []
    queue = list(responses)

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return queue.pop(0) if len(queue) > 1 else queue[0]

    client = AsyncOpenAI(
        base_url="http://llm.test/v1",
        api_key="k",
        max_retries=max_retries,
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )
    return OpenAIGenerator(client), seen


async def test_collects_text_usage_and_finish_reason():
    generator, seen = generator_answering(httpx2.Response(200, json=COMPLETION))
    result = await generator.generate(model="vendor-model", messages=MESSAGES, temperature=0.1, max_tokens=64)
    assert (result.text, result.model, result.prompt_tokens, result.completion_tokens, result.finish_reason) == (
        "Yes [1].", "vendor-model", 11, 3, "stop"
    )
    assert seen[0].url.path == "/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer k"


async def test_server_error_becomes_llm_unavailable_502():
    generator, _ = generator_answering(httpx2.Response(500, json={"error": {"message": "boom"}}))
    with pytest.raises(LLMUnavailable) as caught:
        await generator.generate(model="m", messages=MESSAGES, temperature=0, max_tokens=8)
    assert caught.value.status_code == 502
    assert caught.value.body()["error"] == "llm_unavailable"


async def test_rate_limit_is_retried_by_the_sdk():
    limited = httpx2.Response(429, headers={"retry-after-ms": "10"}, json={"error": {"message": "slow down"}})
    generator, seen = generator_answering(limited, httpx2.Response(200, json=COMPLETION), max_retries=2)
    result = await generator.generate(model="m", messages=MESSAGES, temperature=0, max_tokens=8)
    assert result.text == "Yes [1]." and len(seen) == 2


async def test_unreachable_endpoint_becomes_llm_unavailable_and_not_ready():
    settings = Settings(llm_base_url=f"http://127.0.0.1:{free_port()}/v1", llm_model="m", llm_max_retries=0)
    generator = build_generator(settings)
    try:
        with pytest.raises(LLMUnavailable):
            await generator.generate(model="m", messages=MESSAGES, temperature=0, max_tokens=8)
        assert await generator.ping() is False
    finally:
        await generator.close()


async def test_an_endpoint_without_a_models_route_still_counts_as_ready():
    generator, _ = generator_answering(httpx2.Response(404, json={"error": {"message": "no such route"}}))
    assert await generator.ping() is True
