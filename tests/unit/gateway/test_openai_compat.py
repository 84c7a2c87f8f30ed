import asyncio
import json

import jsonschema
import pytest
from pydantic import ValidationError

from services.gateway.model_offer import ModelOffer, OfferedModels
from services.gateway.openai_compat import (
    ChunkWriter,
    CompletionRequest,
    Message,
    chat_body,
    completion,
    models_list,
)

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


def test_later_assistant_and_tool_messages_and_blank_user_messages_are_ignored():
    body = chat_body(request(("user", "q1"), ("assistant", "a1"), ("user", " \t"), ("user", "q2"), ("assistant", "a2"),
                             ("tool", "{}"), ("user", "\n")))
    assert body == {"query": "q2", "history": [{"question": "q1", "answer": "a1"}]}


def test_a_user_message_shown_as_nothing_is_not_a_question():
    body = chat_body(request(("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("user", "\u200b\u2060\ufeff")))
    assert body == {"query": "q2", "history": [{"question": "q1", "answer": "a1"}]}


def test_a_long_question_keeps_its_end_and_long_turns_their_start():
    body = chat_body(request(("user", "p" * 5000), ("assistant", "a" * 30_000), ("user", "x" * 1500 + " why?  ")))
    assert body["query"] == ("x" * 1500 + " why?")[-1000:]
    assert len(body["history"][0]["question"]) == 4000 and len(body["history"][0]["answer"]) == 20_000


def test_chat_is_asked_for_a_model_only_when_it_offers_it():
    offer = ModelOffer(default="llm-a", models=("llm-a", "llm-b"))
    assert (offer.pick("llm-b"), offer.used("llm-b")) == ("llm-b", "llm-b")
    assert (offer.pick("gpt-4o"), offer.used("gpt-4o")) == (None, "llm-a")
    assert (offer.pick("cairn"), offer.used("cairn")) == (None, "llm-a")
    assert "model_id" not in chat_body(request(("user", "q")), model_id=offer.pick("gpt-4o"))
    assert chat_body(request(("user", "q")), model_id=offer.pick("llm-b"))["model_id"] == "llm-b"


def test_the_offer_is_fetched_once_per_ttl():
    now, fetched = [0.0], []

    async def fetch() -> ModelOffer:
        fetched.append(now[0])
        return ModelOffer(default="llm-a", models=("llm-a",))

    cache = OfferedModels(ttl_s=30, clock=lambda: now[0])

    async def run() -> None:
        await cache.get(fetch)
        now[0] = 29
        await cache.get(fetch)
        now[0] = 30
        await cache.get(fetch)

    asyncio.run(run())
    assert fetched == [0.0, 30]


def test_text_parts_are_read_and_a_missing_question_is_refused():
    parts = [{"type": "text", "text": "How do I"}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "add a user?"}]
    assert chat_body(CompletionRequest(messages=[{"role": "user", "content": parts}]))["query"] == "How do I add a user?"
    # Blank in any script, shown as nothing (zero-width spaces, soft hyphen), or none.
    for blank in (" ", "\u00a0\u3000", "\u200b\ufeff\u2060\u00ad", [{"type": "text", "text": "\t\u200b"}], None):
        with pytest.raises(ValidationError, match="at least one user message must have text"):
            CompletionRequest(messages=[{"role": "system", "content": "q"}, {"role": "user", "content": blank}])


@pytest.mark.parametrize(
    "content", ["a\u0000b", [{"type": "text", "text": "a\u0000b"}], "ab", [{"type": "text", "text": "ab"}], None,
                [{"type": "image_url", "text": None}]],
)
def test_the_schema_and_the_code_agree_on_nul_characters(content):
    schema = CompletionRequest.model_json_schema()
    message_schema = {**schema["$defs"]["Message"], "$defs": schema["$defs"]}
    message = {"role": "user", "content": content}
    try:
        Message.model_validate(message)
        accepted = True
    except ValidationError as refused:
        assert "must not contain NUL characters" in str(refused)
        accepted = False
    assert jsonschema.Draft202012Validator(message_schema).is_valid(message) == accepted


def test_the_request_is_strict_where_its_schema_is():
    with pytest.raises(ValidationError):
        request(("user", "q"), stream="true")
    with pytest.raises(ValidationError):
        CompletionRequest(messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}])


def test_a_completion_carries_the_answer_usage_and_citations():
    out = completion(ANSWER, model="cairn")
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Run it [1]."}
    assert out["usage"]["total_tokens"] == 8 and out["citations"][0]["doc_id"] == "users.md"
    assert out["id"] == "chatcmpl-req-1" and out["cairn"]["confidence"]["level"] == "High"
    assert out["cairn"]["request_id"] == "req-1"  # what POST /api/feedback rates
    assert out["choices"][0]["finish_reason"] == "stop"


def test_an_answer_cut_by_the_token_limit_says_length():
    cut = {**ANSWER, "metadata": {**ANSWER["metadata"], "finish_reason": "length"}}
    assert completion(cut, model="cairn")["choices"][0]["finish_reason"] == "length"
    last = json.loads(ChunkWriter(model="cairn").done(cut).removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "length"


def test_the_streams_last_chunk_numbers_citations_as_the_streamed_text_does():
    writer = ChunkWriter(model="cairn")
    writer.sources({"sources": [{"n": 1, "chunk_id": "other#0"}, {"n": 2, "chunk_id": "users.md#2"}]})
    token = json.loads(writer.token({"text": "Run it [2]."}).removeprefix("data: "))
    assert token["choices"][0]["delta"] == {"content": "Run it [2]."}
    last = json.loads(writer.done(ANSWER).removeprefix("data: "))
    assert last["choices"][0]["finish_reason"] == "stop" and last["citations"][0]["n"] == 2


def _passage(n: int, chunk_id: str, page: int | None) -> dict:
    doc_id = chunk_id.split("#")[0]
    return {"n": n, "doc_id": doc_id, "chunk_id": chunk_id, "title": doc_id, "section": "", "page": page,
            "url": None, "snippet": f"passage {n}", "content": f"passage {n}", "chunk_ids": [chunk_id], "support": None}


def test_passages_of_one_page_merged_by_chat_keep_each_number_the_streamed_text_gave_them():
    writer = ChunkWriter(model="cairn")
    writer.sources({"sources": [_passage(1, "guide.pdf#1", 1), _passage(2, "guide.pdf#0", 1),
                                _passage(3, "guide.pdf#2", 1), _passage(4, "guide.pdf#3", 1),
                                _passage(5, "notes.md#0", None), _passage(6, "notes.md#1", None)]})
    for text in ("Align it [1]. ", "It hums [2, 5]. ", "Recalibrate [Citation 3]."):
        writer.token({"text": text})
    support = {"verdict": "supported", "score": 0.9}
    merged = {**_passage(1, "guide.pdf#1", 1), "support": support,  # chat's [1]: the passages cited of page 1
              "chunk_ids": ["guide.pdf#1", "guide.pdf#0", "guide.pdf#2"]}
    answer = {**ANSWER, "answer": "Align it [1]. It hums [1, 2]. Recalibrate [1].",
              "citations": [merged, {**_passage(2, "notes.md#0", None)}]}
    citations = json.loads(writer.done(answer).removeprefix("data: "))["citations"]
    assert [(c["n"], c["chunk_id"]) for c in citations] == [
        (1, "guide.pdf#1"), (2, "guide.pdf#0"), (3, "guide.pdf#2"), (5, "notes.md#0")
    ]  # passage 4 shares the page but is not cited; 6 is another chunk of a document without pages
    assert all(c["support"] == support for c in citations[:3]) and citations[1]["snippet"] == "passage 2"


def test_a_streamed_completion_is_named_by_its_request_id():
    writer = ChunkWriter(model="cairn", request_id="req-7")
    assert json.loads(writer.first().removeprefix("data: "))["id"] == "chatcmpl-req-7"
    assert json.loads(ChunkWriter(model="cairn").first().removeprefix("data: "))["id"].startswith("chatcmpl-")


def test_models_lists_cairn_first():
    assert [m["id"] for m in models_list(["cairn-extractive"])["data"]] == ["cairn", "cairn-extractive"]


@pytest.mark.parametrize(
    "content",
    ["q", " \t\n", "\u3000", "", None, [], [{"type": "text", "text": " "}, {"type": "image_url"}],
     [{"type": "text", "text": "\v"}, {"type": "text", "text": " x "}], [{"type": "image_url", "text": "q"}],
     "\u200b\ufeff", " \u2060x\u00ad", [{"type": "text", "text": "\u00ad"}, {"type": "text", "text": "\u200bx"}],
     [{"type": "text", "text": "\u200b \u2060"}]],
)
@pytest.mark.parametrize("role", ["user", "assistant"])
def test_the_schema_and_the_code_agree_on_what_is_a_question(role, content):
    schema = CompletionRequest.model_json_schema()["properties"]["messages"]["contains"]
    message = {"role": role, "content": content}
    assert jsonschema.Draft202012Validator(schema).is_valid(message) == Message.model_validate(message).asks


def test_optional_fields_sent_as_null_mean_their_default():
    body = request(("user", "q"), model=None, stream=None, n=None)
    assert (body.stream, body.n) == (None, None) and "model_id" not in chat_body(body)
    assert ModelOffer(default="llm-a", models=("llm-a",)).used(body.model) == "llm-a"
    assert request(("user", "q"), n=1).n == 1


def test_more_than_one_choice_is_refused():
    with pytest.raises(ValidationError, match="n must be 1"):
        request(("user", "q"), n=2)


def test_an_error_chunk_is_in_openais_shape():
    chunk = json.loads(ChunkWriter(model="cairn").error({"error": "llm_unavailable", "message": "down"}).removeprefix("data: "))
    assert chunk == {"error": {"message": "down", "type": "server_error", "code": "llm_unavailable", "param": None}}



def test_a_long_conversation_is_accepted_and_chat_gets_its_last_turns():
    turns = [m for n in range(150) for m in (("user", f"Question {n}?"), ("assistant", f"Answer {n} [1]."))]
    body = chat_body(request(("system", "Be brief."), *turns, ("user", "And then?")))
    assert body["query"] == "And then?"
    assert [t["question"] for t in body["history"]] == [f"Question {n}?" for n in range(140, 150)]
