import json

import pytest

from services.gateway.openai_compat import ChunkWriter, CompletionRequest, chat_body, completion, models_list
from shared.errors import BadRequest

pytestmark = pytest.mark.unit

ANSWER = {
    "answer": "Run it [1].",
    "conversation_id": "c1",
    "citations": [{"n": 1, "chunk_id": "users.md#2", "doc_id": "users.md", "snippet": "Run it."}],
    "sources": [],
    "related_docs": [],
    "confidence": {"level": "High", "score": 0.9, "reason": "r"},
    "grounding": None,
    "metadata": {"kind": "answer", "request_id": "req-1", "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}},
}


def request(*messages, **fields) -> CompletionRequest:
    return CompletionRequest(messages=[{"role": r, "content": c} for r, c in messages], **fields)


def test_the_last_user_message_is_the_question_and_earlier_pairs_the_history():
    body = chat_body(request(("system", "be brief"), ("user", "How are sessions stored?"), ("assistant", "In Redis [1]."),
                             ("user", "And their TTL?")))
    assert body == {"query": "And their TTL?", "history": [{"question": "How are sessions stored?", "answer": "In Redis [1]."}]}


def test_the_cairn_model_means_the_default_and_another_name_is_passed_on():
    assert "model_id" not in chat_body(request(("user", "q")))
    assert chat_body(request(("user", "q"), model="gpt-x"))["model_id"] == "gpt-x"


def test_text_parts_are_read_and_a_missing_question_is_refused():
    parts = [{"type": "text", "text": "How do I"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "add a user?"}]
    assert chat_body(CompletionRequest(messages=[{"role": "user", "content": parts}]))["query"] == "How do I add a user?"
    with pytest.raises(BadRequest):
        chat_body(request(("user", "q"), ("assistant", "a")))


def test_a_completion_carries_the_answer_usage_and_citations():
    out = completion(ANSWER, model="cairn")
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Run it [1]."}
    assert out["usage"]["total_tokens"] == 8 and out["citations"][0]["doc_id"] == "users.md"
    assert out["id"] == "chatcmpl-req-1" and out["cairn"]["confidence"]["level"] == "High"


def test_the_streams_last_chunk_numbers_citations_as_the_streamed_text_does():
    writer = ChunkWriter(model="cairn")
    writer.sources({"sources": [{"n": 1, "chunk_id": "other#0"}, {"n": 2, "chunk_id": "users.md#2"}]})
    token = json.loads(writer.token({"text": "Run it [2]."}).removeprefix("data: "))
    assert token["choices"][0]["delta"] == {"content": "Run it [2]."}
    last = json.loads(writer.done(ANSWER).removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "stop" and last["citations"][0]["n"] == 2


def test_models_lists_cairn_first():
    assert [m["id"] for m in models_list(["cairn-extractive"])["data"]] == ["cairn", "cairn-extractive"]
