"""The chat turn with fake retrieval and publisher, and the real built-in offline generator."""
import pytest

from services.chat.adapters.generator import build_generator
from services.chat.errors import LLMUnavailable, UnknownModel
from services.chat.models import ChatRequest
from services.chat.answering import NO_INFORMATION
from services.chat.pipeline import ChatPipeline, PipelineConfig
from services.chat.settings import Settings
from shared.caller import Caller
from shared.context import request_id_var
from shared.errors import DependencyUnavailable
from shared.tracing import continued_trace
from tests.unit.chat.fakes import GUIDE, FakeRetriever, ListPublisher, RecordingGenerator, make_chunk

pytestmark = pytest.mark.unit

CALLER = Caller(user_id="u1", roles=("user",), session_id="s1")
CONFIG = PipelineConfig(default_model="cairn-extractive", allowed_models=("cairn-extractive", "other"))


@pytest.fixture
async def offline_generator():
    generator = build_generator(Settings())
    yield generator
    await generator.close()


def pipeline(retriever=None, generator=None, config=CONFIG) -> ChatPipeline:
    return ChatPipeline(
        retriever=retriever or FakeRetriever(),
        generator=generator or RecordingGenerator(),
        publisher=ListPublisher(),
        config=config,
    )


async def test_answers_with_citations_from_the_offline_generator(offline_generator):
    chat = pipeline(generator=offline_generator)
    request_id_var.set("req-1")
    with continued_trace("00-" + "a" * 32 + "-" + "b" * 16 + "-01"):
        response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=CALLER)

    assert "cairn user add" in response.answer and "[1]" in response.answer
    assert response.citations[0].n == 1
    assert response.citations[0].doc_id == "doc-1" and response.citations[0].title == "Users and roles"
    assert [s.chunk_id for s in response.sources] == [c.chunk_id for c in response.citations]
    assert response.sources[0].content == GUIDE[0].content
    meta = response.metadata
    assert (meta.request_id, meta.model, meta.finish_reason) == ("req-1", "cairn-extractive", "stop")
    assert (meta.chunks_retrieved, meta.chunks_used) == (3, 2)  # the 0.1 passage is below the threshold
    assert meta.usage.total_tokens == meta.usage.prompt_tokens + meta.usage.completion_tokens > 0
    assert meta.timings_ms.total >= meta.timings_ms.generation > 0
    assert response.confidence.level in ("High", "Medium")

    submitted, generated = chat.publisher.events
    assert (submitted.event_type, generated.event_type) == ("QuerySubmitted", "ResponseGenerated")
    assert submitted.data.top_k == 8 and submitted.data.model == "cairn-extractive"
    assert {e.request_id for e in chat.publisher.events} == {"req-1"}
    assert {e.trace_id for e in chat.publisher.events} == {"a" * 32}
    assert (generated.user_id, generated.session_id, generated.source_service) == ("u1", "s1", "chat")
    assert generated.data.answered is True
    assert generated.data.cited_doc_ids == ["doc-1"]
    assert generated.data.citation_count == len(response.citations)
    assert generated.data.timings_ms["total"] == meta.timings_ms.total


async def test_a_document_cited_twice_is_listed_twice_in_the_event():
    # Two passages of one document (no pages: two numbers): analytics counts citations per document from these.
    passages = [make_chunk(1, "Run cairn user add NAME.", doc_id="users.md"), make_chunk(2, "Run cairn user list.", doc_id="users.md")]
    generator = RecordingGenerator("Add one with cairn user add [1]. List them with cairn user list [2].")
    chat = pipeline(retriever=FakeRetriever(passages), generator=generator)
    response = await chat.answer(request=ChatRequest(query="How do I add and list users?"), caller=CALLER)
    assert [c.n for c in response.citations] == [1, 2]
    generated = chat.publisher.events[-1].data
    assert (generated.citation_count, generated.cited_doc_ids) == (2, ["users.md", "users.md"])


async def test_confidence_rests_on_the_passages_the_answer_cites():
    strong = make_chunk(1, "Login sessions are stored in Redis with a sliding expiry.", score=0.66)
    weak = make_chunk(2, "Logout revokes the token at once. A revoked token gives 401.", score=0.33)
    asked = ChatRequest(query="How are login sessions stored?")
    on_the_weak = pipeline(FakeRetriever([strong, weak]), RecordingGenerator("Logout revokes the token at once [2]."))
    weak_answer = await on_the_weak.answer(request=asked, caller=CALLER)
    assert weak_answer.citations[0].support.verdict == "supported"
    assert weak_answer.confidence.level == "Low", weak_answer.confidence
    on_the_strong = pipeline(FakeRetriever([strong, weak]), RecordingGenerator("Login sessions are stored in Redis [1]."))
    assert (await on_the_strong.answer(request=asked, caller=CALLER)).confidence.level == "High"


async def test_no_relevant_chunk_skips_the_llm():
    generator = RecordingGenerator()
    chat = pipeline(retriever=FakeRetriever([make_chunk(1, "Unrelated text.", score=0.1)]), generator=generator)
    response = await chat.answer(request=ChatRequest(query="What is the meaning of life?"), caller=CALLER)
    assert generator.calls == []
    assert response.answer == NO_INFORMATION
    assert response.citations == [] and response.sources == []
    assert response.confidence.level == "Low" and "0.10" in response.confidence.reason
    assert response.metadata.model is None and response.metadata.finish_reason is None
    assert (response.metadata.chunks_retrieved, response.metadata.chunks_used) == (1, 0)
    assert chat.publisher.events[-1].data.answered is False


async def test_an_answer_citing_nothing_is_replaced_by_the_fallback():
    generator = RecordingGenerator("The sky is green, trust me.")
    chat = pipeline(generator=generator)
    response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=CALLER)
    assert len(generator.calls) == 1
    assert response.answer == NO_INFORMATION and response.citations == []
    assert response.confidence.level == "Low"
    assert response.metadata.model == "cairn-extractive"  # the model was asked
    assert chat.publisher.events[-1].data.answered is False


@pytest.mark.parametrize("answer", ["[1][2]", "[1, 2].", "[Users and roles > Adding users]"])
async def test_an_answer_of_citation_markers_alone_is_replaced_by_the_fallback(answer):
    chat = pipeline(generator=RecordingGenerator(answer))
    response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=CALLER)
    assert (response.answer, response.citations, response.metadata.kind) == (NO_INFORMATION, [], "no_information")
    assert "no citation" in response.confidence.reason
    assert chat.publisher.events[-1].data.answered is False


async def test_an_interval_is_not_a_citation_so_an_answer_citing_nothing_else_is_rejected():
    chat = pipeline(generator=RecordingGenerator("A relevance score lies in [0, 1]."))
    response = await chat.answer(request=ChatRequest(query="What range has a score?"), caller=CALLER)
    assert (response.answer, response.citations) == (NO_INFORMATION, [])


async def test_the_reasoning_a_model_writes_before_its_answer_is_neither_shown_nor_cited():
    generator = RecordingGenerator(
        "<think>\nPassage [2] is about listing, [1] about adding.\n</think>\n\nRun the command [1]."
    )
    response = await pipeline(generator=generator).answer(request=ChatRequest(query="q"), caller=CALLER)
    assert response.answer == "Run the command [1]."
    assert [(c.n, c.doc_id) for c in response.citations] == [(1, "doc-1")]


async def test_invalid_citation_numbers_are_dropped_and_related_docs_listed():
    chat = pipeline(generator=RecordingGenerator("Use the command [2][7]."))
    response = await chat.answer(request=ChatRequest(query="q"), caller=CALLER)
    assert response.answer == "Use the command [1]."
    assert [c.doc_id for c in response.citations] == ["doc-2"]
    assert [(d.doc_id, d.cited) for d in response.related_docs] == [("doc-1", False), ("doc-2", True), ("doc-3", False)]


async def test_request_options_reach_retrieval_and_the_model():
    retriever, generator = FakeRetriever(), RecordingGenerator()
    chat = pipeline(retriever=retriever, generator=generator)
    request = ChatRequest(query="  add user  ", top_k=2, model_id="other", filters={"category": "guide"})
    await chat.answer(request=request, caller=CALLER)
    assert retriever.calls[0] == {"query": "add user", "top_k": 2, "filters": {"category": "guide"}, "caller": CALLER}
    assert generator.calls[0]["model"] == "other"
    assert generator.calls[0]["messages"][1] == {"role": "user", "content": "add user"}


async def test_unknown_model_is_refused_before_anything_happens():
    retriever = FakeRetriever()
    chat = pipeline(retriever=retriever)
    with pytest.raises(UnknownModel) as caught:
        await chat.answer(request=ChatRequest(query="q", model_id="gpt-unknown"), caller=CALLER)
    assert caught.value.status_code == 422 and "cairn-extractive" in caught.value.message
    assert retriever.calls == []
    assert chat.publisher.types() == []  # like any invalid field: no question is counted, no model invented


async def test_retrieval_down_publishes_query_failed():
    chat = pipeline(retriever=FakeRetriever(error=DependencyUnavailable("retrieval")))
    with pytest.raises(DependencyUnavailable):
        await chat.answer(request=ChatRequest(query="q"), caller=CALLER)
    assert chat.publisher.types() == ["QuerySubmitted", "QueryFailed"]
    failed = chat.publisher.events[-1].data
    assert (failed.stage, failed.error) == ("retrieval", "retrieval_unavailable")


async def test_llm_failure_publishes_query_failed_at_generation():
    chat = pipeline(generator=RecordingGenerator(error=LLMUnavailable("boom")))
    with pytest.raises(LLMUnavailable):
        await chat.answer(request=ChatRequest(query="q"), caller=CALLER)
    failed = chat.publisher.events[-1].data
    assert (failed.stage, failed.error) == ("generation", "llm_unavailable")


async def test_unexpected_error_is_reported_as_internal():
    chat = pipeline(retriever=FakeRetriever(error=RuntimeError("bug")))
    with pytest.raises(RuntimeError):
        await chat.answer(request=ChatRequest(query="q"), caller=CALLER)
    assert chat.publisher.events[-1].data.error == "internal_error"
