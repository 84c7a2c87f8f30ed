"""GET /analytics/documents asks retrieval for its library over real HTTP: a stand-in retrieval served on
loopback lists documents, fails, hangs, or is not there at all."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Header, HTTPException

from services.analytics.adapters.retrieval_library import HttpDocumentLibrary
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.main import create_app
from services.analytics.settings import Settings
from services.retrieval.main import create_app as create_retrieval
from services.retrieval.ports import StoredChunk
from services.retrieval.settings import Settings as RetrievalSettings
from shared.errors import DependencyUnavailable
from tests.support import free_port, serve_in_thread
from tests.unit.analytics.analytics_fixture import LIBRARY, load
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.integration

TOKEN = "documents-test-token"
AUTH = {"X-Service-Token": TOKEN}
RANGE = {"from": "2025-03-01T12:00:00Z", "to": "2025-03-01T12:10:00Z"}
TIMEOUT_S = 1.0


def stand_in_retrieval() -> FastAPI:
    app = FastAPI()
    app.state.mode = "list"

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/documents")
    async def documents(x_service_token: str = Header("")) -> dict:
        if x_service_token != TOKEN:
            raise HTTPException(401)
        if app.state.mode == "fail":
            raise HTTPException(500)
        if app.state.mode == "hang":
            await asyncio.sleep(TIMEOUT_S * 5)
        return {"documents": [{"doc_id": doc_id, "chunks": 1} for doc_id in LIBRARY]}

    return app


@pytest.fixture(scope="module")
def retrieval() -> Iterator[tuple[FastAPI, str]]:
    app = stand_in_retrieval()
    with serve_in_thread(app) as url:
        yield app, url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlEventStore]:
    store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/analytics.db")
    store.create_schema()
    load(store)
    yield store
    store.close()


@asynccontextmanager
async def client_for(store: SqlEventStore, tmp_path: Path, retrieval_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path, retrieval_url=retrieval_url,
                        retrieval_timeout_s=TIMEOUT_S)
    app = create_app(settings)
    async with httpx.AsyncClient() as http:
        # What the lifespan builds, without its broker consumer.
        app.state.store = store
        app.state.library = HttpDocumentLibrary(
            client=http, settings=settings, base_urls=settings.retrieval_urls, timeout_s=settings.retrieval_timeout_s
        )
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
            yield client


@pytest.fixture
async def client(store, tmp_path, retrieval) -> AsyncIterator[httpx.AsyncClient]:
    app, url = retrieval
    app.state.mode = "list"
    async with client_for(store, tmp_path, url) as client:
        yield client


async def test_never_cited_documents_come_from_retrievals_library(client: httpx.AsyncClient) -> None:
    response = await client.get("/analytics/documents", params=RANGE, headers=AUTH)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["never_cited"], body["never_cited_total"]) == (["handbook", "zeta"], 2)
    assert body["most_cited"][0] == {"doc_id": "guide", "citations": 2, "requests": 2}


@pytest.mark.parametrize("mode", ["fail", "hang"])
async def test_retrieval_failing_or_hanging_is_503_for_documents_only(
    client: httpx.AsyncClient, retrieval, mode: str
) -> None:
    retrieval[0].state.mode = mode
    started = time.monotonic()
    response = await client.get("/analytics/documents", params=RANGE, headers=AUTH)
    assert (response.status_code, response.json()["error"]) == (503, "retrieval_unavailable")
    assert time.monotonic() - started < TIMEOUT_S * 3
    summary = await client.get("/analytics/summary", params=RANGE, headers=AUTH)
    assert (summary.status_code, summary.json()["queries"]) == (200, 8)


async def test_retrieval_not_listening_is_503(store, tmp_path) -> None:
    async with client_for(store, tmp_path, f"http://127.0.0.1:{free_port()}") as client:
        response = await client.get("/analytics/documents", headers=AUTH)
        assert (response.status_code, response.json()["error"]) == (503, "retrieval_unavailable")
        assert (await client.get("/analytics/gaps", headers=AUTH)).status_code == 200


async def test_the_library_comes_from_another_retrieval_replica_while_the_first_is_down(store, tmp_path, retrieval):
    """With `cairn up --replicas retrieval=2`, the report failed and /readyz said retrieval was down whenever the
    first replica was, while the second answered."""
    app, url = retrieval
    app.state.mode = "list"
    urls = [f"http://127.0.0.1:{free_port()}", url]
    async with client_for(store, tmp_path, ",".join(urls)) as client:
        response = await client.get("/analytics/documents", params=RANGE, headers=AUTH)
    async with httpx.AsyncClient() as http:
        library = HttpDocumentLibrary(client=http, settings=Settings(service_token=TOKEN), base_urls=urls, timeout_s=1)
        checks = await library.readiness()
    assert response.status_code == 200, response.text
    assert response.json()["never_cited"] == ["handbook", "zeta"]
    assert checks == {"retrieval": True, "retrieval_service_token": True}


async def test_a_wrong_service_token_at_retrieval_is_503(store, tmp_path, retrieval) -> None:
    settings = Settings(service_token="not-the-one-retrieval-knows", data_dir=tmp_path)
    async with httpx.AsyncClient() as http:
        library = HttpDocumentLibrary(client=http, settings=settings, base_urls=[retrieval[1]], timeout_s=TIMEOUT_S)
        with pytest.raises(DependencyUnavailable) as info:
            await library.document_ids()
    assert info.value.code == "retrieval_unavailable"


async def test_a_library_larger_than_one_page_of_retrievals_list_is_read_whole(tmp_path) -> None:
    """The real retrieval app lists its documents in pages; the never-cited report needs every one of them."""
    chunks = [StoredChunk(f"doc-{n:05d}#0", f"doc-{n:05d}", "text", [1.0], {"chunk_index": 0, "content_hash": "h"})
              for n in range(2_500)]
    library = FakeStore()
    await library.upsert(chunks)
    retrieval_app = create_retrieval(
        RetrievalSettings(service_token=TOKEN, data_dir=tmp_path), embedder=FakeEmbedder(), store=library
    )
    settings = Settings(service_token=TOKEN, data_dir=tmp_path)
    with serve_in_thread(retrieval_app) as url:
        async with httpx.AsyncClient() as http:
            library = HttpDocumentLibrary(client=http, settings=settings, base_urls=[url], timeout_s=10)
            ids = await library.document_ids()
    assert ids == [c.doc_id for c in chunks]
