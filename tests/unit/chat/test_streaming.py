"""The streamed turn: event order, errors as events, and a reader that leaves."""
import asyncio

import pytest

from services.chat.errors import LLMRetryLater, LLMUnavailable, UnknownModel
from services.chat.models import ChatRequest, ChatResponse
from services.chat.pipeline import ChatPipeline, PipelineConfig
from services.chat.streaming import open_stream
from shared.caller import Caller
from shared.errors import DependencyUnavailable
from tests.unit.chat.fakes import FakeRetriever, ListPublisher, MemoryConversations, RecordingGenerator, make_chunk

pytestmark = pytest.mark.unit

CALLER = Caller(user_id="u1")
CONFIG = PipelineConfig(default_model="m", allowed_models=("m",))


def pipeline(generator=None, retriever=None, conversations=None) -> ChatPipeline:
    return ChatPipeline(
        retriever=retriever or FakeRetriever(), generator=generator or RecordingGenerator("Run the command [1]."),
        publisher=ListPublisher(), config=CONFIG, conversations=conversations,
    )


async def collect(chat: ChatPipeline, query: str = "How do I add a user?") -> list:
    return [e async for e in await open_stream(chat, request=ChatRequest(query=query), caller=CALLER)]


async def test_sources_then_tokens_then_the_post_processed_response():
    chat = pipeline()
    events = await collect(chat)
    assert [e.event for e in events] == ["sources", "token", "token", "token", "token", "done"]
    assert [s.n for s in events[0].data.sources] == [1, 2]  # the passages as the prompt numbers them
    assert "".join(e.data["text"] for e in events[1:-1]) == "Run the command [1]."
    done = events[-1].data
    assert isinstance(done, ChatResponse) and done.citations[0].doc_id == "doc-1"
    assert done.metadata.timings_ms.total >= done.metadata.timings_ms.generation
    assert chat.publisher.types() == ["QuerySubmitted", "ResponseGenerated"]


async def test_nothing_relevant_streams_the_fallback_as_one_token():
    chat = pipeline(retriever=FakeRetriever([make_chunk(1, "Unrelated.", score=0.05)]))
    events = await collect(chat)
    assert [e.event for e in events] == ["sources", "token", "done"]
    assert events[1].data["text"] == events[2].data.answer and chat.generator.calls == []


async def test_a_model_failure_mid_stream_is_an_error_event():
    chat = pipeline(generator=RecordingGenerator("Run the command [1].", error=LLMUnavailable("dropped")))
    events = await collect(chat)
    assert [e.event for e in events] == ["sources", "token", "error"]
    assert events[-1].data == {"error": "llm_unavailable", "message": "dropped", "status": 502}
    failed = chat.publisher.events[-1].data
    assert (failed.stage, failed.error) == ("generation", "llm_unavailable")


async def test_an_error_event_carries_the_status_and_retry_after_the_plain_endpoint_would_answer():
    busy = LLMRetryLater("the LLM is rate limiting chat", retry_after=7)
    events = await collect(pipeline(generator=RecordingGenerator("Run the command [1].", error=busy)))
    assert events[-1].data == {
        "error": "llm_unavailable", "message": "the LLM is rate limiting chat", "status": 503, "retry_after": "7"
    }


async def test_failures_before_the_first_event_raise_as_for_a_plain_answer():
    with pytest.raises(UnknownModel):
        await open_stream(pipeline(), request=ChatRequest(query="q", model_id="x"), caller=CALLER)
    chat = pipeline(retriever=FakeRetriever(error=DependencyUnavailable("retrieval")))
    with pytest.raises(DependencyUnavailable):
        await open_stream(chat, request=ChatRequest(query="q"), caller=CALLER)
    assert chat.publisher.types() == ["QuerySubmitted", "QueryFailed"]


async def test_a_reader_that_leaves_is_reported_as_disconnected():
    chat = pipeline()
    events = await open_stream(chat, request=ChatRequest(query="How do I add a user?"), caller=CALLER)
    assert (await anext(events)).event == "sources"
    assert (await anext(events)).event == "token"
    await events.aclose()
    failed = chat.publisher.events[-1]
    assert (failed.event_type, failed.data.error) == ("QueryFailed", "client_disconnected")


class SlowConversations(MemoryConversations):
    """Keeps a turn only after `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.release = asyncio.Event(), asyncio.Event()

    async def append(self, **kwargs) -> None:
        self.writing.set()
        await self.release.wait()
        await super().append(**kwargs)


async def test_a_reader_leaving_while_the_turn_is_stored_still_has_it_kept_and_counted_as_answered():
    """Every token was sent: the answer stands, as if the reader had stayed for `done`."""
    conversations = SlowConversations()
    chat = pipeline(conversations=conversations)
    events = await open_stream(chat, request=ChatRequest(query="How do I add a user?"), caller=CALLER)

    async def read_all() -> None:
        async for _ in events:
            pass

    reader = asyncio.create_task(read_all())
    await asyncio.wait_for(conversations.writing.wait(), 5)
    reader.cancel()  # what the server does when the client hangs up
    with pytest.raises(asyncio.CancelledError):
        await reader
    conversations.release.set()
    for _ in range(100):
        if chat.publisher.types()[-1] != "QuerySubmitted":
            break
        await asyncio.sleep(0.01)
    assert chat.publisher.types() == ["QuerySubmitted", "ResponseGenerated"]
    assert [len(turns) for turns in conversations.turns.values()] == [1]


async def test_a_reader_leaving_after_done_does_not_count_the_question_twice():
    chat = pipeline()
    events = await open_stream(chat, request=ChatRequest(query="How do I add a user?"), caller=CALLER)
    async for event in events:
        if event.event == "done":
            break
    await events.aclose()
    assert chat.publisher.types() == ["QuerySubmitted", "ResponseGenerated"]
