"""A misspelt field in a request body is refused with a 422 naming it, through the public gateway to the real
chat and retrieval services (real Redis, MiniLM and Chroma, over HTTP), while what the gateway and chat send
on to each other, and what OpenAI clients send to /v1, still passes."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway_app
from services.retrieval.main import create_app as create_retrieval_app
from services.retrieval.settings import Settings as RetrievalSettings
from tests.integration.gateway.chat_stand_in import gateway_settings, login
from tests.support import serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration

TOKEN = "unknown-fields-token"
INTERNAL = {"X-Service-Token": TOKEN}
DOCUMENTS = {
    "guide/sessions.md": "# Sessions\n\nLogin sessions are stored in Redis and expire after 24 hours without use.",
    "guide/users.md": "# Users\n\nRun cairn user add NAME to add a user. Login sessions start at the login page.",
}


@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[str]:
    settings = RetrievalSettings(
        service_token=TOKEN, data_dir=tmp_path_factory.mktemp("retrieval"), chroma_collection="unknown-fields-test"
    )
    with serve_in_thread(create_retrieval_app(settings, embedder=embedder)) as url:
        for source, text in DOCUMENTS.items():
            added = httpx.post(f"{url}/documents", json={"text": text, "source": source}, headers=INTERNAL)
            assert added.status_code == 200, added.text
        yield url


@pytest.fixture(scope="module")
def chat_url(retrieval_url: str, redis_url: str) -> Iterator[str]:
    settings = ChatSettings(
        service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, query_reformulation="off"
    )  # no LLM_BASE_URL: the built-in offline model answers
    with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as url:
        yield url


@pytest.fixture
def gateway(tmp_path: Path, redis_url: str, amqp_url: str, unique: str, chat_url: str, retrieval_url: str):
    settings = gateway_settings(
        redis_url=redis_url,
        prefix=unique,
        chat_url=chat_url,
        retrieval_urls=[retrieval_url],
        service_token=TOKEN,
        data_dir=tmp_path,
        amqp_url=amqp_url,
        events_exchange=f"{unique}.events",
        analytics_queue=f"{unique}.analytics",
    )
    with TestClient(create_gateway_app(settings)) as client:
        yield client


def assert_unknown_field(response: httpx.Response, *where: str | int) -> None:
    assert response.status_code == 422, response.text
    body = response.json()
    name = ".".join(str(part) for part in where)
    assert body["error"] == "invalid_request"
    assert body["message"] == f"{name}: unknown field", body
    assert body["detail"][0]["loc"][-len(where):] == list(where)


def test_a_misspelt_search_filter_is_refused_and_the_right_one_filters(gateway: TestClient) -> None:
    ann = login(gateway, "ann")
    only_users = {"doc_id": "guide/users.md"}
    misspelt = gateway.post("/api/search", json={"query": "login sessions", "filter": only_users}, headers=ann)
    assert_unknown_field(misspelt, "filter")

    filtered = gateway.post("/api/search", json={"query": "login sessions", "filters": only_users}, headers=ann)
    assert filtered.status_code == 200, filtered.text
    assert {r["doc_id"] for r in filtered.json()["results"]} == {"guide/users.md"}


def test_a_misspelt_chat_field_is_refused_and_a_follow_up_with_filters_is_answered(gateway: TestClient) -> None:
    ann = login(gateway, "ann")
    question = {"query": "How are login sessions stored?"}
    assert_unknown_field(gateway.post("/api/chat", json={**question, "filter": {"doc_id": "x"}}, headers=ann), "filter")
    assert_unknown_field(gateway.post("/api/chat", json={**question, "topk": 3}, headers=ann), "topk")
    past = {"question": "What is Cairn?", "answr": "A RAG service."}
    nested = gateway.post("/api/chat", json={**question, "history": [past]}, headers=ann)
    assert_unknown_field(nested, "history", 0, "answr")  # named before the `answer` it leaves missing
    streamed = gateway.post("/api/chat/stream", json={**question, "conversation": "c1"}, headers=ann)
    assert_unknown_field(streamed, "conversation")

    # Every field chat knows, passed by the gateway and sent on by chat to retrieval (query, top_k, filters).
    only_sessions = {"doc_id": "guide/sessions.md"}
    first = gateway.post("/api/chat", json={**question, "top_k": 4, "filters": only_sessions}, headers=ann)
    assert first.status_code == 200, first.text
    assert {c["doc_id"] for c in first.json()["citations"]} == {"guide/sessions.md"}
    follow_up = {
        "query": "And when do they expire?",
        "conversation_id": first.json()["conversation_id"],
        "top_k": 4,
        "filters": only_sessions,
        "model_id": first.json()["metadata"]["model"],
    }
    with gateway.stream("POST", "/api/chat/stream", json=follow_up, headers=ann) as response:
        assert response.status_code == 200, response.read()
        assert "event: done" in response.read().decode()


def test_a_misspelt_field_of_a_document_login_or_rating_is_refused(gateway: TestClient) -> None:
    ada, ann = login(gateway, "ada"), login(gateway, "ann")
    document = {"text": "Backups run nightly.", "source": "guide/backups.md", "titel": "Backups"}
    assert_unknown_field(gateway.post("/api/documents", json=document, headers=ada), "titel")

    signing_in = {"username": "ann", "password": "correct horse battery", "remember": True}
    assert_unknown_field(gateway.post("/auth/login", json=signing_in), "remember")
    assert_unknown_field(gateway.post("/auth/login", json={"username": "ann", "pasword": "x"}), "pasword")

    answer = gateway.post("/api/chat", json={"query": "How are login sessions stored?"}, headers=ann)
    request_id = answer.json()["metadata"]["request_id"]
    rating = {"request_id": request_id, "rating": -1, "coment": "wrong page"}
    assert_unknown_field(gateway.post("/api/feedback", json=rating, headers=ann), "coment")
    rating = {"request_id": request_id, "rating": -1, "comment": "wrong page"}
    assert gateway.post("/api/feedback", json=rating, headers=ann).status_code == 202


def test_openai_clients_keep_sending_fields_cairn_does_not_use(gateway: TestClient) -> None:
    ann = login(gateway, "ann")
    body = {
        "model": "cairn",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "How are login sessions stored?", "name": "ann"},
            {"role": "assistant", "content": "In Redis [1].", "refusal": None},
            {"role": "user", "content": [{"type": "text", "text": "When do they expire?", "cache_control": {}}]},
        ],
        "temperature": 0.2,
        "top_p": 1,
        "user": "ann",
        "seed": 7,
        "stream_options": {"include_usage": True},
    }
    completion = gateway.post("/v1/chat/completions", json=body, headers=ann)
    assert completion.status_code == 200, completion.text
    assert completion.json()["choices"][0]["message"]["content"]
    with gateway.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, headers=ann) as response:
        assert response.status_code == 200
        assert response.read().decode().rstrip().endswith("data: [DONE]")
