"""POST /api/documents waits INGEST_UPSTREAM_TIMEOUT_S for retrieval, not the questions' UPSTREAM_TIMEOUT_S."""
import asyncio

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import add_user
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery"
INGEST_S = 1.0  # how long the stand-in takes to ingest a document


def _slow_retrieval() -> FastAPI:
    """Retrieval ingesting synchronously: the answer comes once the document is embedded and stored."""
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/documents")
    async def add_document() -> dict:
        await asyncio.sleep(INGEST_S)
        return {"doc_id": "big.md", "title": "Big", "chunks": 3000, "status": "added"}

    @app.delete("/documents/{doc_id}")
    async def delete_document(doc_id: str) -> dict:
        await asyncio.sleep(INGEST_S)  # held until an ingest of that document under way is done
        return {"doc_id": doc_id, "deleted_chunks": 3000}

    @app.post("/search")
    async def search() -> dict:
        await asyncio.sleep(INGEST_S)
        return {"results": []}

    return app


@pytest.fixture(scope="module")
def retrieval_url():
    with serve_in_thread(_slow_retrieval()) as url:
        yield url


@pytest.fixture
def admin_client(redis_url, unique, retrieval_url):
    def start(**timeouts: float) -> TestClient:
        asyncio.run(_seed_admin(redis_url, unique))
        settings = Settings(redis_url=redis_url, redis_prefix=unique, retrieval_url=retrieval_url, **timeouts)
        return TestClient(create_app(settings))

    return start


def _upload(client: TestClient):
    token = client.post("/auth/login", json={"username": "ada", "password": PASSWORD}).json()["token"]
    return client.post(
        "/api/documents", files={"file": ("big.md", b"# Big\n\ntext")}, headers={"Authorization": f"Bearer {token}"}
    )


def test_an_ingest_longer_than_the_upstream_timeout_is_answered(admin_client):
    with admin_client(upstream_timeout_s=INGEST_S / 4, ingest_upstream_timeout_s=INGEST_S * 10) as client:
        response = _upload(client)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "added"


def test_a_delete_held_for_an_ingest_of_its_document_is_answered(admin_client):
    with admin_client(upstream_timeout_s=INGEST_S / 4, ingest_upstream_timeout_s=INGEST_S * 10) as client:
        token = client.post("/auth/login", json={"username": "ada", "password": PASSWORD}).json()["token"]
        response = client.delete("/api/documents/big.md", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    assert response.json()["deleted_chunks"] == 3000


def test_the_upstream_timeout_still_bounds_the_other_retrieval_routes(admin_client):
    with admin_client(upstream_timeout_s=INGEST_S / 4, ingest_upstream_timeout_s=INGEST_S * 10) as client:
        token = client.post("/auth/login", json={"username": "ada", "password": PASSWORD}).json()["token"]
        response = client.post("/api/search", json={"query": "q"}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 504 and response.json()["error"] == "retrieval_timeout"


def test_an_ingest_the_gateway_gives_up_on_may_still_complete(admin_client):
    with admin_client(ingest_upstream_timeout_s=INGEST_S / 4) as client:
        response = _upload(client)
    assert response.status_code == 504
    body = response.json()
    assert body["error"] == "retrieval_timeout"  # the code clients know; the message says what to do
    assert "may still" in body["message"] and "GET /api/documents/{doc_id}" in body["message"]


def test_a_delete_held_longer_than_the_ingest_timeout_is_504(admin_client):
    with admin_client(upstream_timeout_s=INGEST_S * 10, ingest_upstream_timeout_s=INGEST_S / 4) as client:
        token = client.post("/auth/login", json={"username": "ada", "password": PASSWORD}).json()["token"]
        response = client.delete("/api/documents/big.md", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 504 and response.json()["error"] == "retrieval_timeout", response.text


async def _seed_admin(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    await add_user(users=RedisUserStore(redis, prefix=prefix, timeout_s=2), username="ada", password=PASSWORD,
                   roles=["admin"])
    await redis.aclose()
