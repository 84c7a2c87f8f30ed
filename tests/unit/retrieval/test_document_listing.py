"""GET /documents in pages: limit, cursor, total, and the 422s of a bad limit or cursor, with fakes behind."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.retrieval.main import create_app
from services.retrieval.ports import StoredChunk
from services.retrieval.settings import Settings
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit

TOKEN = "unit-test-token"
AUTH = {"X-Service-Token": TOKEN}
DOCUMENTS = 250


def stored(doc_id: str, chunks: int) -> list[StoredChunk]:
    meta = {"content_hash": "h", "title": doc_id.upper()}
    return [StoredChunk(f"{doc_id}#{i}", doc_id, f"text {i}", [1.0], meta | {"chunk_index": i}) for i in range(chunks)]


@pytest.fixture
def store() -> FakeStore:
    store = FakeStore()
    chunks = [c for n in range(DOCUMENTS) for c in stored(f"doc-{n:04d}.md", 1 + n % 3)]
    asyncio.run(store.upsert(chunks))
    return store


@pytest.fixture
def client(tmp_path: Path, store: FakeStore) -> Iterator[TestClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path)
    with TestClient(create_app(settings, embedder=FakeEmbedder(), store=store)) as client:
        yield client


def test_the_list_comes_in_pages_of_100_by_default_with_the_total_and_a_cursor(client: TestClient) -> None:
    first = client.get("/documents", headers=AUTH)
    assert first.status_code == 200, first.text
    body = first.json()
    assert [d["doc_id"] for d in body["documents"]] == [f"doc-{n:04d}.md" for n in range(100)]
    assert body["total"] == DOCUMENTS and isinstance(body["next_cursor"], str)
    assert body["documents"][1]["chunks"] == 2 and body["documents"][1]["title"] == "DOC-0001.MD"


def test_following_next_cursor_lists_every_document_once_in_order(client: TestClient) -> None:
    seen: list[str] = []
    params: dict[str, str | int] = {"limit": 64}
    while True:
        body = client.get("/documents", params=params, headers=AUTH).json()
        assert len(body["documents"]) <= 64 and body["total"] == DOCUMENTS
        seen += [d["doc_id"] for d in body["documents"]]
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]
    assert seen == [f"doc-{n:04d}.md" for n in range(DOCUMENTS)]


def test_a_cursor_stays_valid_when_its_last_document_is_deleted(client: TestClient) -> None:
    body = client.get("/documents", params={"limit": 10}, headers=AUTH).json()
    assert client.delete("/documents/doc-0009.md", headers=AUTH).status_code == 200
    after = client.get("/documents", params={"limit": 2, "cursor": body["next_cursor"]}, headers=AUTH).json()
    assert [d["doc_id"] for d in after["documents"]] == ["doc-0010.md", "doc-0011.md"]
    assert after["total"] == DOCUMENTS - 1


def test_the_largest_page_is_1000_and_the_last_page_has_no_cursor(client: TestClient) -> None:
    body = client.get("/documents", params={"limit": 1000}, headers=AUTH).json()
    assert len(body["documents"]) == DOCUMENTS and body["next_cursor"] is None


def test_an_empty_collection_lists_nothing(tmp_path: Path) -> None:
    app = create_app(Settings(service_token=TOKEN, data_dir=tmp_path), embedder=FakeEmbedder(), store=FakeStore())
    with TestClient(app) as client:
        assert client.get("/documents", headers=AUTH).json() == {"documents": [], "total": 0, "next_cursor": None}


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"limit": 0}, "query.limit"),
        ({"limit": 1001}, "query.limit"),
        ({"limit": "ten"}, "query.limit"),
        ({"cursor": "not a cursor!"}, "query.cursor"),
        ({"cursor": "%%%"}, "query.cursor"),
        ({"cursor": ""}, "query.cursor"),
        ({"cursor": "ZG9jLTAwMDEubWQ="}, "query.cursor"),  # padded, which no next_cursor is
        ({"cursor": "ZG9jL"}, "query.cursor"),  # a length that base64 never has
    ],
)
def test_a_bad_limit_or_cursor_is_422_naming_it(client: TestClient, params: dict, where: str) -> None:
    response = client.get("/documents", params=params, headers=AUTH)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_request" and response.json()["message"].startswith(where + ": ")


def test_an_altered_cursor_is_still_a_place_in_doc_id_order(client: TestClient) -> None:
    # "ZG9jLTAwMDUubWQ" is the cursor of doc-0005.md; "_w" holds a byte that is not UTF-8, after every doc_id.
    after = client.get("/documents", params={"limit": 1, "cursor": "ZG9jLTAwMDUubWQ"}, headers=AUTH).json()
    assert [d["doc_id"] for d in after["documents"]] == ["doc-0006.md"]
    beyond = client.get("/documents", params={"cursor": "_w"}, headers=AUTH).json()
    assert (beyond["documents"], beyond["total"], beyond["next_cursor"]) == ([], DOCUMENTS, None)


def test_openapi_describes_the_paging(client: TestClient) -> None:
    get = client.get("/openapi.json").json()["paths"]["/documents"]["get"]
    params = {p["name"]: p for p in get["parameters"]}
    assert params["limit"]["schema"]["maximum"] == 1000 and params["limit"]["schema"]["default"] == 100
    assert "cursor" in params and "422" in get["responses"]
