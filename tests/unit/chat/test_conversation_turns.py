"""Follow-ups, small talk and the events of a turn, with fakes for retrieval, the model and the store."""
import dataclasses

import pytest

from services.chat.errors import ConversationNotFound
from services.chat.models import ChatRequest
from services.chat.pipeline import ChatPipeline, PipelineConfig
from services.chat.reformulation import HeuristicReformulator
from shared.caller import Caller
from shared.errors import DependencyUnavailable
from tests.unit.chat.fakes import FakeRetriever, ListPublisher, MemoryConversations, RecordingGenerator

pytestmark = pytest.mark.unit

ANN = Caller(user_id="ann", roles=("user",), session_id="s1")
BOB = Caller(user_id="bob", roles=("user",), session_id="s2")
CONFIG = PipelineConfig(default_model="m", allowed_models=("m",))


def pipeline(*, conversations=None, retriever=None, generator=None) -> ChatPipeline:
    return ChatPipeline(
        retriever=retriever or FakeRetriever(),
        generator=generator or RecordingGenerator(),
        publisher=ListPublisher(),
        config=CONFIG,
        conversations=conversations if conversations is not None else MemoryConversations(),
        reformulator=HeuristicReformulator(),
    )


async def test_a_follow_up_is_searched_as_a_standalone_question():
    chat = pipeline()
    first = await chat.answer(request=ChatRequest(query="How are login sessions stored?"), caller=ANN)
    follow_up = await chat.answer(
        request=ChatRequest(query="and what about its TTL?", conversation_id=first.conversation_id), caller=ANN
    )
    assert follow_up.conversation_id == first.conversation_id
    assert follow_up.metadata.reformulated_query == "What about the TTL of login sessions?"
    assert chat.retriever.calls[-1]["query"] == "What about the TTL of login sessions?"
    assert follow_up.metadata.timings_ms.reformulate >= 0
    generated = chat.publisher.events[-1].data
    assert generated.reformulated_query == "What about the TTL of login sessions?"
    assert generated.conversation_id == first.conversation_id


async def test_a_first_question_is_not_rewritten_and_starts_a_conversation():
    conversations = MemoryConversations()
    chat = pipeline(conversations=conversations)
    response = await chat.answer(request=ChatRequest(query="What about its TTL?"), caller=ANN)
    assert response.metadata.reformulated_query == "What about its TTL?"
    assert [t.question for t in conversations.turns[response.conversation_id]] == ["What about its TTL?"]



async def test_the_response_says_when_a_conversation_id_had_no_turn_to_follow_up_on():
    chat = pipeline()
    first = await chat.answer(request=ChatRequest(query="How are login sessions stored?"), caller=ANN)
    follow_up = await chat.answer(
        request=ChatRequest(query="and its TTL?", conversation_id=first.conversation_id), caller=ANN
    )
    made_up = await chat.answer(request=ChatRequest(query="and its side effects?", conversation_id="c-made-up"), caller=ANN)
    assert (first.new_conversation, follow_up.new_conversation, made_up.new_conversation) == (True, False, True)
    assert made_up.conversation_id == "c-made-up" and made_up.metadata.reformulated_query == "and its side effects?"
    again = await chat.answer(request=ChatRequest(query="Can it be changed?", conversation_id="c-made-up"), caller=ANN)
    assert again.new_conversation is False

async def test_another_users_conversation_is_not_found_and_reported():
    chat = pipeline()
    first = await chat.answer(request=ChatRequest(query="How are login sessions stored?"), caller=ANN)
    with pytest.raises(ConversationNotFound) as caught:
        await chat.answer(request=ChatRequest(query="and its TTL?", conversation_id=first.conversation_id), caller=BOB)
    assert caught.value.status_code == 404
    failed = chat.publisher.events[-1]
    assert (failed.event_type, failed.data.stage, failed.data.error) == ("QueryFailed", "conversation", "conversation_not_found")
    with pytest.raises(ConversationNotFound):  # small talk too: the id is refused the same way whatever is asked
        await chat.answer(request=ChatRequest(query="thanks!", conversation_id=first.conversation_id), caller=BOB)


class BrokenConversations(MemoryConversations):
    async def history(self, **_):
        raise DependencyUnavailable("conversation_store")

    async def append(self, **_):
        raise DependencyUnavailable("conversation_store")


async def test_a_store_that_is_down_fails_follow_ups_but_not_new_questions():
    chat = pipeline(conversations=BrokenConversations())
    response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=ANN)
    assert response.citations  # the answer stands; only the turn was not kept
    with pytest.raises(DependencyUnavailable):
        await chat.answer(request=ChatRequest(query="and then?", conversation_id="c1"), caller=ANN)


async def test_small_talk_needs_no_retrieval_nor_model_and_is_still_recorded():
    chat = pipeline()
    response = await chat.answer(request=ChatRequest(query="Thanks!"), caller=ANN)
    assert chat.retriever.calls == [] and chat.generator.calls == []
    assert response.metadata.kind == "small_talk" and response.metadata.model is None
    assert (response.confidence.level, response.confidence.score) == ("Low", 0.0)
    assert chat.publisher.types() == ["QuerySubmitted", "ResponseGenerated"]
    assert chat.publisher.events[-1].data.kind == "small_talk"


async def test_response_generated_carries_the_answer_figures():
    chat = pipeline(generator=RecordingGenerator("Run `cairn user add NAME --role user` [1]. Redis keeps the login sessions [2]."))
    response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=ANN)
    data = chat.publisher.events[-1].data
    assert data.model == "m" and data.no_answer is False and data.kind == "answer"
    assert data.latency_ms == response.metadata.timings_ms.total > 0
    assert data.citation_count == 2 and data.supported_citations == 2
    assert data.grounding_score == response.grounding.score == 1.0
    assert data.chunks_retrieved == 3 and data.usage.total_tokens == 107
    assert data.cited_doc_ids == ["doc-1", "doc-2"]


class SnapshotNamingGenerator(RecordingGenerator):
    """An endpoint that answers with its own dated name for the model asked, as OpenAI's does."""

    async def generate(self, **kwargs):
        generation = await super().generate(**kwargs)
        return dataclasses.replace(generation, model=f"{generation.model}-2025-06-01")


async def test_the_event_names_the_model_asked_as_the_submitted_one_does_the_response_the_endpoints_name():
    chat = pipeline(generator=SnapshotNamingGenerator())
    response = await chat.answer(request=ChatRequest(query="How do I add a user?"), caller=ANN)
    submitted, generated = chat.publisher.events[-2:]
    assert submitted.data.model == generated.data.model == "m"
    assert response.metadata.model == "m-2025-06-01"


async def test_history_given_with_the_request_resolves_a_follow_up_without_a_store():
    chat = pipeline(conversations=None)
    chat.conversations = None
    history = [{"question": "How are login sessions stored?", "answer": "In Redis [1]."}]
    response = await chat.answer(request=ChatRequest(query="and what about its TTL?", history=history), caller=ANN)
    assert response.metadata.reformulated_query == "What about the TTL of login sessions?"


@pytest.mark.parametrize("history", [[], [{"question": "How are login sessions stored?", "answer": "In Redis [1]."}]])
async def test_a_question_that_brings_its_history_is_not_stored(history):
    conversations = MemoryConversations()
    chat = pipeline(conversations=conversations)
    await chat.answer(request=ChatRequest(query="What about its TTL?", history=history), caller=ANN)
    assert conversations.turns == {}


async def test_a_conversation_id_sent_with_a_history_is_still_continued():
    conversations = MemoryConversations()
    chat = pipeline(conversations=conversations)
    first = await chat.answer(request=ChatRequest(query="How are login sessions stored?"), caller=ANN)
    history = [{"question": "Something else?", "answer": "Yes [1]."}]  # ignored: the stored turns count
    await chat.answer(
        request=ChatRequest(query="and its TTL?", conversation_id=first.conversation_id, history=history), caller=ANN
    )
    assert len(conversations.turns[first.conversation_id]) == 2


async def test_a_chain_of_follow_ups_in_a_given_history_keeps_its_subject_as_a_stored_one_does():
    chat = pipeline()
    asked = ["What is hybrid search?", "And what about its weights?", "Can they be changed?"]
    stored = None
    for question in asked:  # a stored conversation, as conversation_id keeps it
        stored = await chat.answer(
            request=ChatRequest(query=question, conversation_id=stored.conversation_id if stored else None), caller=ANN
        )
    history = [{"question": q, "answer": "An answer [1]."} for q in asked[:2]]  # as an OpenAI client sends it
    given = await chat.answer(request=ChatRequest(query=asked[2], history=history), caller=ANN)
    assert stored.metadata.reformulated_query == "Can the weights of hybrid search be changed?"
    assert given.metadata.reformulated_query == stored.metadata.reformulated_query


async def test_small_talk_in_a_given_history_is_left_out_as_a_stored_conversation_leaves_it_out():
    chat = pipeline()
    stored = None
    for question in ("How are login sessions stored?", "ok thanks", "Can it be changed?"):
        stored = await chat.answer(
            request=ChatRequest(query=question, conversation_id=stored.conversation_id if stored else None), caller=ANN
        )
    history = [  # as an OpenAI client sends it: the small talk and its reply are in the message list
        {"question": "How are login sessions stored?", "answer": "In Redis [1]."},
        {"question": "ok thanks", "answer": "You're welcome! Ask another question whenever you like."},
    ]
    given = await chat.answer(request=ChatRequest(query="Can it be changed?", history=history), caller=ANN)
    assert stored.metadata.reformulated_query == "Can login sessions be changed?"
    assert given.metadata.reformulated_query == stored.metadata.reformulated_query


async def test_a_request_for_more_keeps_the_action_of_the_question_before_it():
    chat = pipeline()
    stored = None
    for question in ("How do I add a user?", "tell me more", "Can I do it in bulk?"):
        stored = await chat.answer(
            request=ChatRequest(query=question, conversation_id=stored.conversation_id if stored else None), caller=ANN
        )
    history = [{"question": "How do I add a user?", "answer": "Run cairn user add [1]."},
               {"question": "tell me more", "answer": "It takes a role [1]."}]
    given = await chat.answer(request=ChatRequest(query="Can I do it in bulk?", history=history), caller=ANN)
    assert stored.metadata.reformulated_query == "Can I add a user in bulk?"
    assert given.metadata.reformulated_query == stored.metadata.reformulated_query


class HistoryRecordingReformulator(HeuristicReformulator):
    async def reformulate(self, *, query, history, model):
        self.seen = [turn.standalone for turn in history]
        return await super().reformulate(query=query, history=history, model=model)


@pytest.mark.parametrize("blank", ["   ", "\u200b", "\u2060\ufeff", "\u00ad "])
async def test_a_blank_past_question_in_a_given_history_is_left_out(blank):
    chat = pipeline()
    chat.reformulator = HistoryRecordingReformulator()
    history = [{"question": "What is hybrid search?", "answer": "Keyword and vector search fused [1]."},
               {"question": blank, "answer": "Ask a question about the documents."}]
    given = await chat.answer(request=ChatRequest(query="Can it be tuned?", history=history), caller=ANN)
    assert chat.reformulator.seen == ["What is hybrid search?"]
    assert given.metadata.reformulated_query == "Can hybrid search be tuned?"
