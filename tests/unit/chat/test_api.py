"""The HTTP surface: contract, bad input, service token, dependency errors (fakes behind the app)."""
from contextlib import asynccontextmanager

import httpx
import pytest

from services.chat.errors import LLMUnavailable
from services.chat.main import create_app
from services.chat.settings import Settings
from shared.errors import DependencyUnavailable
from tests.unit.chat.fakes import FakeRetriever, ListPublisher, MemoryConversations, RecordingGenerator

pytestmark = pytest.mark.unit

TOKEN = "unit-test-token"
HEADERS = {"X-Service-Token": TOKEN, "X-User-Id": "u7", "X-User-Roles": "user,analyst", "X-Session-Id": "s7"}


@asynccontextmanager
async def chat_client(retriever=None, generator=None, publisher=None, conversations=None):
    settings = Settings(service_token=TOKEN, chat_models="cairn-extractive,other")
    app = create_app(
        settings, retriever=retriever or FakeRetriever(), generator=generator, publisher=publisher or ListPublisher(),
        conversations=conversations or MemoryConversations(),
    )
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://chat") as client:
            yield client


async def test_chat_returns_the_contract_shape_with_the_offline_generator():
    publisher, retriever = ListPublisher(), FakeRetriever()
    async with chat_client(retriever=retriever, publisher=publisher) as client:
        response = await client.post("/chat", json={"query": "How do I add a user?"}, headers=HEADERS)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {
        "query", "answer", "conversation_id", "new_conversation", "citations", "sources", "related_docs", "confidence",
        "grounding", "metadata",
    }
    assert body["new_conversation"] is True
    assert set(body["citations"][0]) == {
        "n", "doc_id", "chunk_id", "title", "section", "page", "url", "snippet", "content", "chunk_ids", "support"
    }
    assert set(body["confidence"]) == {"level", "score", "reason"}
    assert set(body["metadata"]["timings_ms"]) == {"reformulate", "retrieval", "generation", "citations", "total"}
    assert body["metadata"]["request_id"] == response.headers["x-request-id"]
    assert "[1]" in body["answer"]
    caller = retriever.calls[0]["caller"]
    assert (caller.user_id, caller.roles, caller.session_id) == ("u7", ("user", "analyst"), "s7")
    assert publisher.started and publisher.closed
    assert publisher.types() == ["QuerySubmitted", "ResponseGenerated"]


@pytest.mark.parametrize(
    "payload,where",
    [
        ({"query": ""}, "query"),
        ({"query": "   "}, "query"),
        ({"query": "\u00a0\u3000\u2003"}, "query"),  # blank in any script: retrieval would refuse it too
        ({"query": "\u200b\ufeff \u2060\u00ad"}, "query"),  # shown as nothing: zero-width spaces, soft hyphen
        ({"query": "x" * 1001}, "query"),
        ({"query": "what is\u0000 redis"}, "query"),  # analytics could not keep it as asked
        ({"query": 42}, "query"),
        ({"query": ["a"]}, "query"),
        ({}, "query"),
        ({"query": "ok", "top_k": 0}, "top_k"),
        ({"query": "ok", "top_k": 51}, "top_k"),
        ({"query": "ok", "top_k": "five"}, "top_k"),
        ({"query": "ok", "top_k": 2.5}, "top_k"),
        ({"query": "ok", "filters": "category=guide"}, "filters"),
        # A past turn would carry it into the rewritten question: refused naming the turn, not the search.
        ({"query": "and then?", "history": [{"question": "what is\u0000 redis", "answer": "A store."}]},
         "history.0.question"),
        ({"query": "and then?", "history": [{"question": "what is redis", "answer": "A\u0000 store."}]},
         "history.0.answer"),
        ({"query": "ok", "conversation_id": "has space"}, "conversation_id"),
        ({"query": "ok", "history": [{"question": "q", "answer": "a"}] * 51}, "history"),
        ({"query": "ok", "history": [{"question": "q" * 4001, "answer": "a"}]}, "history.0.question"),
        ({"query": "ok", "history": [{"question": "q", "answer": "a" * 20_001}]}, "history.0.answer"),
    ],
)
async def test_bad_input_is_422_invalid_request(payload, where):
    async with chat_client() as client:
        response = await client.post("/chat", json=payload, headers=HEADERS)
    assert response.status_code == 422
    body = response.json()
    assert body["error"] == "invalid_request" and body["message"].startswith(where)


async def test_the_detail_lists_every_wrong_field_and_the_message_names_the_first():
    async with chat_client() as client:
        response = await client.post("/chat", json={"query": "", "top_k": 0}, headers=HEADERS)
    body = response.json()
    assert response.status_code == 422 and body["message"].startswith("query: ")
    assert [entry["loc"] for entry in body["detail"]] == [["body", "query"], ["body", "top_k"]]


async def test_a_query_of_exactly_1000_characters_after_trimming_is_accepted():
    async with chat_client() as client:
        response = await client.post("/chat", json={"query": "  " + "a" * 1000 + "  "}, headers=HEADERS)
    assert response.status_code == 200


async def test_unknown_model_is_422_unknown_model():
    async with chat_client() as client:
        refused = await client.post("/chat", json={"query": "add user", "model_id": "gpt-9"}, headers=HEADERS)
        allowed = await client.post("/chat", json={"query": "add user", "model_id": "other"}, headers=HEADERS)
    assert refused.status_code == 422 and refused.json()["error"] == "unknown_model"
    assert "other" in refused.json()["message"]
    assert allowed.status_code == 200


async def test_malformed_json_is_400():
    async with chat_client() as client:
        response = await client.post(
            "/chat", content=b'{"query": "unterminated', headers={**HEADERS, "Content-Type": "application/json"}
        )
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"


async def test_a_query_with_an_unpaired_surrogate_is_400_before_any_work():
    publisher, retriever = ListPublisher(), FakeRetriever()
    async with chat_client(retriever=retriever, publisher=publisher) as client:
        response = await client.post(
            "/chat", content=b'{"query": "add \\ud800 user"}', headers={**HEADERS, "Content-Type": "application/json"}
        )
    assert response.status_code == 400 and response.json()["error"] == "malformed_json"
    assert "unpaired surrogate" in response.json()["message"]
    assert retriever.calls == [] and publisher.events == []


async def test_a_filter_naming_a_key_twice_is_400_not_the_last_value():
    publisher, retriever = ListPublisher(), FakeRetriever()
    body = b'{"query": "add user", "filters": {"team": "ops", "team": "dev"}}'
    async with chat_client(retriever=retriever, publisher=publisher) as client:
        response = await client.post("/chat", content=body, headers={**HEADERS, "Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": "malformed_json", "message": 'request body is not valid JSON: duplicate key "team" in an object'
    }
    assert retriever.calls == [] and publisher.events == []


async def test_nan_or_infinity_in_the_body_is_400_before_any_work():
    publisher, retriever = ListPublisher(), FakeRetriever()
    body = b'{"query": "add user", "filters": {"year": {"$lt": Infinity}}}'
    async with chat_client(retriever=retriever, publisher=publisher) as client:
        response = await client.post("/chat", content=body, headers={**HEADERS, "Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": "malformed_json",
        "message": "request body is not valid JSON: Infinity is not JSON (JSON numbers are finite)",
    }
    assert retriever.calls == [] and publisher.events == []


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_calls_without_the_service_token_are_401(token):
    headers = {"X-Service-Token": token} if token else {}
    retriever = FakeRetriever()
    async with chat_client(retriever=retriever) as client:
        response = await client.post("/chat", json={"query": "add user"}, headers=headers)
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    assert retriever.calls == []


async def test_retrieval_down_is_503_retrieval_unavailable():
    async with chat_client(retriever=FakeRetriever(error=DependencyUnavailable("retrieval"))) as client:
        response = await client.post("/chat", json={"query": "add user"}, headers=HEADERS)
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable"


async def test_llm_failure_is_502_llm_unavailable():
    async with chat_client(generator=RecordingGenerator(error=LLMUnavailable("boom"))) as client:
        response = await client.post("/chat", json={"query": "add user"}, headers=HEADERS)
    assert response.status_code == 502 and response.json()["error"] == "llm_unavailable"


async def test_readiness_reports_retrieval_and_llm_without_needing_them():
    retriever = FakeRetriever()
    async with chat_client(retriever=retriever) as client:
        ready = await client.get("/readyz")
        retriever.healthy = False
        degraded = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"retrieval": True, "llm": True, "conversation_store": True}
    # Chat still answers, with a 503 naming retrieval: it stays in its load balancer.
    assert degraded.status_code == 200 and degraded.json() == {
        "status": "ready", "checks": {"retrieval": False, "llm": True, "conversation_store": True}
    }


async def test_readiness_reports_the_conversation_store_without_needing_it():
    conversations = MemoryConversations()
    conversations.healthy = False
    async with chat_client(conversations=conversations) as client:
        ready = await client.get("/readyz")
        answered = await client.post("/chat", json={"query": "How do I add a user?"}, headers=HEADERS)
    # Follow-ups get 503 conversation_store_unavailable, first questions are still answered: chat stays ready.
    assert ready.status_code == 200 and ready.json()["checks"]["conversation_store"] is False
    assert answered.status_code == 200


class UnconnectedPublisher(ListPublisher):
    connected = False

    def __init__(self, backlog: int) -> None:
        super().__init__()
        self.waiting = backlog

    @property
    def backlog(self) -> int:
        return self.waiting


@pytest.mark.parametrize(("backlog", "warned"), [(0, False), (3, True)])
async def test_readiness_warns_of_an_unconnected_broker_only_when_events_wait(backlog, warned, caplog):
    async with chat_client(publisher=UnconnectedPublisher(backlog)) as client:
        assert (await client.get("/readyz")).status_code == 200
    assert ("events broker not connected" in caplog.text) is warned


async def test_models_lists_the_allow_list_with_the_default_first():
    async with chat_client() as client:
        response = await client.get("/models", headers=HEADERS)
    assert response.json() == {"default": "cairn-extractive", "models": ["cairn-extractive", "other"]}


async def test_a_filter_retrieval_would_refuse_is_refused_before_any_work():
    retriever, generator = FakeRetriever(), RecordingGenerator()
    body = {"query": "and how do I rotate it?", "filters": {"bad-key": 1},
            "history": [{"question": "What is the service token?", "answer": "A shared secret."}]}
    async with chat_client(retriever=retriever, generator=generator) as client:
        response = await client.post("/chat", json=body, headers=HEADERS)
    assert response.status_code == 422 and "filters: filter key 'bad-key'" in response.json()["message"], response.text
    assert retriever.calls == [] and generator.calls == []


def test_the_schema_names_only_the_event_stream_for_a_streamed_answer():
    """A client generated from the schema would otherwise try to read the stream as JSON."""
    stream = create_app(Settings()).openapi()["paths"]["/chat/stream"]["post"]["responses"]["200"]
    assert list(stream["content"]) == ["text/event-stream"]
