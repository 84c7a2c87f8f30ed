"""The in-process offline generator answers the OpenAI SDK as its HTTP app does."""
import httpx
import httpx2
import openai
import pytest
from openai import AsyncOpenAI

from services.chat.offline_llm.app import create_app
from services.chat.offline_llm.transport import OfflineTransport
from services.chat.prompt import build_prompt
from tests.unit.chat.fakes import GUIDE

pytestmark = pytest.mark.unit

MESSAGES = build_prompt(query="How do I add a user?", chunks=GUIDE, token_budget=3500).messages


def sdk_client() -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url="http://offline-llm/v1", api_key="offline", max_retries=0,
        http_client=httpx2.AsyncClient(transport=OfflineTransport()),
    )


async def served_answer(body: dict) -> dict:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app()), base_url="http://offline") as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_whole_answer_is_the_served_app_s_answer():
    async with sdk_client() as client:
        completion = await client.chat.completions.create(model="m1", messages=MESSAGES, max_tokens=512)
    served = await served_answer({"model": "m1", "messages": MESSAGES, "max_tokens": 512})
    assert completion.choices[0].message.content == served["choices"][0]["message"]["content"]
    assert "cairn user add" in completion.choices[0].message.content
    assert (completion.model, completion.choices[0].finish_reason) == ("m1", "stop")
    assert completion.usage.model_dump(exclude_none=True) == served["usage"]


async def test_a_streamed_answer_arrives_word_by_word_with_its_usage():
    async with sdk_client() as client:
        whole = await client.chat.completions.create(model="m", messages=MESSAGES)
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    words = [chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices]
    assert "".join(words) == whole.choices[0].message.content and len(words) > 5
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "stop"
    assert chunks[-1].usage == whole.usage


async def test_max_tokens_cuts_the_answer():
    async with sdk_client() as client:
        completion = await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=3)
    assert completion.choices[0].finish_reason == "length"
    assert len(completion.choices[0].message.content.split()) == 3


async def test_it_lists_its_model():
    async with sdk_client() as client:
        models = await client.models.list()
    assert [model.id for model in models.data] == ["cairn-extractive"]


async def test_a_request_it_cannot_answer_is_the_sdk_s_error_for_its_status():
    async with sdk_client() as client:
        with pytest.raises(openai.UnprocessableEntityError, match="messages"):
            await client.chat.completions.create(model="m", messages=[])
        with pytest.raises(openai.NotFoundError, match="no route POST /v1/embeddings"):
            await client.embeddings.create(model="m", input="text")
