"""A file upload through the public gateway reaches retrieval byte for byte (real Redis, real HTTP)."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app as create_gateway
from services.gateway.settings import Settings as GatewaySettings
from services.gateway.users import add_user
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app as create_retrieval
from services.retrieval.settings import Settings as RetrievalSettings
from tests.support import serve_in_thread
from tests.unit.retrieval.files import make_pdf

pytestmark = pytest.mark.integration

TOKEN = "gateway-upload-token"
PASSWORD = "correct horse battery"


async def _seed_admin(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    await add_user(users=RedisUserStore(redis, prefix=prefix, timeout_s=2), username="ada", password=PASSWORD, roles=["admin"])
    await redis.aclose()


@pytest.fixture
def gateway(tmp_path: Path, redis_url: str, unique: str, embedder: SentenceTransformerEmbedder) -> Iterator[TestClient]:
    asyncio.run(_seed_admin(redis_url, unique))
    retrieval = create_retrieval(RetrievalSettings(service_token=TOKEN, data_dir=tmp_path / "data"), embedder=embedder)
    with serve_in_thread(retrieval) as retrieval_url:
        settings = GatewaySettings(redis_url=redis_url, redis_prefix=unique, retrieval_url=retrieval_url, service_token=TOKEN)
        with TestClient(create_gateway(settings)) as client:
            login = client.post("/auth/login", json={"username": "ada", "password": PASSWORD}).json()
            client.headers["Authorization"] = f"Bearer {login['token']}"
            yield client


def test_a_pdf_uploaded_through_the_gateway_is_parsed_by_retrieval(gateway: TestClient) -> None:
    pdf = make_pdf(["Boilers are serviced in autumn.", "The flue is swept every spring."], title="Boiler care")
    added = gateway.post(
        "/api/documents", files={"file": ("boiler.pdf", pdf, "application/pdf")}, data={"category": "manuals"}
    )
    assert added.status_code == 200, added.text
    assert added.json() == {"doc_id": "boiler.pdf", "title": "Boiler care", "status": "added", "chunks": 2}
    listed = {d["doc_id"]: d for d in gateway.get("/api/documents").json()["documents"]}
    assert (listed["boiler.pdf"]["pages"], listed["boiler.pdf"]["category"]) == (2, "manuals")

    refused = gateway.post("/api/documents", files={"file": ("sheet.xlsx", b"PK\x03\x04", "application/octet-stream")})
    assert refused.status_code == 415 and "sheet.xlsx" in refused.json()["message"]


def test_a_document_its_similar_documents_and_its_deletion_go_through_the_gateway(gateway: TestClient) -> None:
    texts = {
        "notes/boilers.md": "# Boilers\n\nBoilers are serviced every autumn by a heating engineer.",
        "notes/heating.md": "# Heating\n\nA heating engineer checks the boiler and radiators each autumn.",
        "notes/garden.md": "# Garden\n\nTomatoes are planted out after the last frost in May.",
    }
    for source, text in texts.items():
        assert gateway.post("/api/documents", json={"text": text, "source": source}).status_code == 200
    document = gateway.get("/api/documents/notes/boilers.md")
    assert document.status_code == 200 and document.json()["title"] == "Boilers"
    similar = gateway.get("/api/documents/notes/boilers.md/similar", params={"top_k": 2})
    assert similar.status_code == 200, similar.text
    assert [d["doc_id"] for d in similar.json()["results"]] == ["notes/heating.md", "notes/garden.md"]
    assert gateway.delete("/api/documents/notes/boilers.md").status_code == 200
    missing = gateway.get("/api/documents/notes/boilers.md")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_the_document_list_is_paged_through_the_gateway(gateway: TestClient) -> None:
    for n in range(5):
        assert gateway.post("/api/documents", json={"text": f"Note number {n}.", "doc_id": f"note-{n}"}).status_code == 200
    first = gateway.get("/api/documents", params={"limit": 2})
    assert first.status_code == 200, first.text
    assert ([d["doc_id"] for d in first.json()["documents"]], first.json()["total"]) == (["note-0", "note-1"], 5)
    rest = gateway.get("/api/documents", params={"limit": 10, "cursor": first.json()["next_cursor"]}).json()
    assert ([d["doc_id"] for d in rest["documents"]], rest["next_cursor"]) == (["note-2", "note-3", "note-4"], None)
    refused = gateway.get("/api/documents", params={"cursor": "?!"})
    assert refused.status_code == 422 and refused.json()["message"].startswith("query.cursor: "), refused.text
