"""The HTTP contract with fakes behind it: status codes and JSON error bodies."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit

TOKEN = "unit-test-token"
AUTH = {"X-Service-Token": TOKEN}


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def client(tmp_path: Path, store: FakeStore) -> Iterator[TestClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path)
    with TestClient(create_app(settings, embedder=FakeEmbedder(), store=store)) as client:
        yield client


def test_documents_round_trip(client: TestClient) -> None:
    added = client.post("/documents", json={"text": "# Hello\n\nworld", "source": "docs/hello.md", "url": "http://x/h"}, headers=AUTH)
    assert added.status_code == 200
    assert added.json() == {"doc_id": "docs/hello.md", "title": "Hello", "status": "added", "chunks": 1}
    listed = client.get("/documents", headers=AUTH).json()["documents"]
    assert listed[0]["doc_id"] == "docs/hello.md" and listed[0]["url"] == "http://x/h" and listed[0]["chunks"] == 1
    found = client.post("/search", json={"query": "hello world", "mode": "dense"}, headers=AUTH).json()
    assert found["mode"] == "dense" and found["results"][0]["metadata"]["title"] == "Hello"
    assert found["results"][0]["keyword_score"] is None
    # A doc_id with slashes is addressable as a path.
    assert client.delete("/documents/docs/hello.md", headers=AUTH).json() == {"doc_id": "docs/hello.md", "deleted_chunks": 1}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("post", "/search", {"query": "x"}), ("post", "/documents", {"text": "x"}), ("get", "/documents", None), ("delete", "/documents/a", None)],
)
@pytest.mark.parametrize("headers", [{}, {"X-Service-Token": "wrong"}])
def test_every_route_needs_the_service_token(client: TestClient, method: str, path: str, body, headers) -> None:
    response = client.request(method, path, json=body, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    "body",
    [
        {"query": ""},
        {"query": "   "},
        {"query": "\u200b\ufeff \u2060\u00ad"},  # shown as nothing: nothing to search for
        {"query": "x" * 1001},
        {"query": "redis\u0000"},  # no text Cairn stores holds U+0000
        {"query": 42},
        {"query": "x", "top_k": 0},
        {"query": "x", "top_k": 51},
        {"query": "x", "top_k": "many"},
        {"query": "x", "mode": "sparse"},
        {"query": "x", "threshold": 2},
        {"query": "x", "filters": {"$or": "x"}},
        {"query": "x", "filters": {"category": ["a", "b"]}},
        {"query": "x", "filters": {"category\n": "a"}},
        # What JSON Schema calls the wrong type is refused, not coerced.
        {"query": "x", "top_k": "3"},
        {"query": "x", "top_k": True},
        {"query": "x", "threshold": "0.5"},
        {"query": "x", "threshold": False},
        {"query": "x", "rerank": 0},
        {"query": "x", "rerank": "false"},
        {},
    ],
)
def test_bad_search_requests_get_422(client: TestClient, body: dict) -> None:
    response = client.post("/search", json=body, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"


@pytest.mark.parametrize("body", [{"text": ""}, {"text": " \n\t "}, {"title": "no text"}, {"text": "x", "doc_id": ""}])
def test_bad_documents_get_422(client: TestClient, body: dict) -> None:
    response = client.post("/documents", json=body, headers=AUTH)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"


def test_json_integers_and_a_query_trimmed_to_the_limit_are_accepted(client: TestClient) -> None:
    body = {"query": "  " + "x" * 1000 + "\n", "top_k": 3.0, "threshold": 0, "rerank": False}
    assert client.post("/search", json=body, headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/documents", "GET, POST"),
        ("OPTIONS", "/documents/a.md", "GET, DELETE"),
        ("POST", "/documents/guides/a.md", "GET, DELETE"),
        # .../similar names the similar documents, never a document whose id ends in /similar.
        ("DELETE", "/documents/a.md/similar", "GET"),
        ("GET", "/search", "POST"),
    ],
)
def test_405_names_every_method_of_the_path(client: TestClient, method: str, path: str, allow: str) -> None:
    response = client.request(method, path, headers=AUTH)
    assert (response.status_code, response.headers["allow"]) == (405, allow)
    assert response.json()["error"] == "method_not_allowed"


@pytest.mark.parametrize("path", ["/search", "/documents"])
def test_malformed_json_gets_400(client: TestClient, path: str) -> None:
    response = client.post(path, content=b'{"query": ', headers=AUTH | {"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "malformed_json"


def test_deleting_an_unknown_document_is_404(client: TestClient) -> None:
    response = client.delete("/documents/nope.md", headers=AUTH)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("post", "/search", {"query": "x"}), ("post", "/documents", {"text": "x"}), ("get", "/documents", None), ("delete", "/documents/a", None)],
)
def test_a_store_that_does_not_answer_gives_503_naming_chroma(client: TestClient, store: FakeStore, method, path, body) -> None:
    store.available = False
    response = client.request(method, path, json=body, headers=AUTH)
    assert response.status_code == 503
    assert response.json()["error"] == "chroma_unavailable"


def test_readiness_reports_the_store_and_needs_the_index(client: TestClient, store: FakeStore) -> None:
    assert client.get("/readyz").json() == {"status": "ready", "checks": {"chroma": True, "embedder": True, "index": True}}
    store.available = False  # the index was loaded: searches it holds are still answered
    response = client.get("/readyz")
    assert response.status_code == 200 and response.json()["checks"]["chroma"] is False


def test_openapi_describes_the_routes(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/documents", "/documents/{doc_id}", "/documents/{doc_id}/similar", "/search"} <= set(paths)
    assert set(paths["/documents/{doc_id}"]) == {"get", "delete"}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    assert all(paths["/search"]["post"]["responses"][s]["content"] == error for s in ("400", "401", "422", "503"))


def test_openapi_says_rerank_cannot_be_true_without_a_model(tmp_path: Path) -> None:
    def rerank(settings: Settings) -> dict:
        return create_app(settings).openapi()["components"]["schemas"]["SearchRequest"]["properties"]["rerank"]

    assert {"type": "boolean", "enum": [False]} in rerank(Settings(service_token=TOKEN, data_dir=tmp_path))["anyOf"]
    offered = rerank(Settings(service_token=TOKEN, data_dir=tmp_path, rerank_model=tmp_path))
    assert {"type": "boolean"} in offered["anyOf"]
