"""A collection holds vectors of one embedding model: retrieval refuses to start on it with another one,
naming the settings, rather than answer every search 503 (another length) or rank nonsense (the same)."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
from pathlib import Path

import chromadb
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from services.retrieval.adapters.chroma_store import ChromaStore
from services.retrieval.errors import EmbeddingModelMismatch
from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from shared.errors import DependencyUnavailable
from tests.integration.retrieval.chroma_server import ChromaServer
from tests.support import free_port
from tests.unit.retrieval.fakes import DIMENSIONS, FakeEmbedder

pytestmark = pytest.mark.integration

TOKEN = "model-change-token"
AUTH = {"X-Service-Token": TOKEN}
GUIDE = {"text": "# Guide\n\nQuokkas live on Rottnest Island.", "doc_id": "guide.md"}


class ShortEmbedder(FakeEmbedder):
    """Another model: vectors of another length."""

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [vector[: DIMENSIONS // 2] for vector in await super().embed_documents(texts)]

    async def embed_query(self, text: str) -> list[float]:
        return (await super().embed_query(text))[: DIMENSIONS // 2]


def model_folder(tmp_path: Path, name: str) -> Path:
    """A folder standing for EMBEDDING_MODEL_PATH: the fake embedders load nothing from it."""
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "model.safetensors").write_text(name)
    return folder


def settings(tmp_path: Path, model: str) -> Settings:
    return Settings(
        service_token=TOKEN, data_dir=tmp_path, chroma_collection="guides", embedding_model_path=model_folder(tmp_path, model)
    )


def ingest_guide(tmp_path: Path, model: str) -> None:
    with TestClient(create_app(settings(tmp_path, model), embedder=FakeEmbedder())) as client:
        assert client.post("/documents", json=GUIDE, headers=AUTH).status_code == 200


def assert_refused(tmp_path: Path, model: str, embedder: FakeEmbedder, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(EmbeddingModelMismatch), TestClient(create_app(settings(tmp_path, model), embedder=embedder)):
        pass
    lines = [line for line in capsys.readouterr().err.splitlines() if "cannot start" in line]
    assert len(lines) == 1
    line = lines[0]
    assert line.startswith("retrieval: cannot start: EMBEDDING_MODEL_PATH, CHROMA_COLLECTION: ")
    assert "'guides'" in line and f"{DIMENSIONS}-dimensional vectors" in line and "new CHROMA_COLLECTION" in line
    return line


@pytest.mark.parametrize("embedder", [FakeEmbedder(), ShortEmbedder()], ids=["same length", "other length"])
def test_another_model_is_refused_at_start_and_the_first_one_serves_again(
    tmp_path: Path, embedder: FakeEmbedder, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest_guide(tmp_path, "model-a")
    line = assert_refused(tmp_path, "model-b", embedder, capsys)
    assert "model-a:" in line and "model-b:" in line  # the model it was built with, and the one configured

    with TestClient(create_app(settings(tmp_path, "model-a"), embedder=FakeEmbedder())) as client:
        found = client.post("/search", json={"query": "where do quokkas live", "mode": "dense"}, headers=AUTH)
        assert found.status_code == 200 and found.json()["results"][0]["doc_id"] == "guide.md"


def test_an_empty_collection_records_the_first_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with TestClient(create_app(settings(tmp_path, "model-a"), embedder=FakeEmbedder())) as client:
        assert client.get("/readyz").status_code == 200
    with pytest.raises(EmbeddingModelMismatch), TestClient(create_app(settings(tmp_path, "model-b"), embedder=FakeEmbedder())):
        pass


def ingest_unrecorded(tmp_path: Path) -> None:
    """The guide in a collection made before models were recorded: a store given to the app checks nothing."""
    unrecorded = ChromaStore(collection="guides", path=tmp_path / "chroma")
    with TestClient(create_app(settings(tmp_path, "model-a"), embedder=FakeEmbedder(), store=unrecorded)) as client:
        assert client.post("/documents", json=GUIDE, headers=AUTH).status_code == 200


def test_a_collection_from_before_records_the_model_when_its_vectors_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ingest_unrecorded(tmp_path)
    line = assert_refused(tmp_path, "model-b", ShortEmbedder(), capsys)
    assert "model-a" not in line and "model-b:" in line  # no model recorded: the length of its vectors tells

    with TestClient(create_app(settings(tmp_path, "model-a"), embedder=FakeEmbedder())) as client:
        found = client.post("/search", json={"query": "quokkas", "mode": "dense"}, headers=AUTH)
        assert found.status_code == 200 and found.json()["results"][0]["doc_id"] == "guide.md"
    # Recorded now: another model of the same length is refused too.
    assert "model-a:" in assert_refused(tmp_path, "model-b", FakeEmbedder(), capsys)


async def test_replicas_starting_at_once_with_different_models_do_not_both_start(
    chroma_server: ChromaServer, unique: str
) -> None:
    async def start(model_id: str) -> ChromaStore:
        store = ChromaStore(collection=unique, url=chroma_server.url, model_id=model_id)
        await store.open()
        await store.check_model(dimension=DIMENSIONS)
        return store

    started = await asyncio.gather(start("model-a:1"), start("model-b:2"), return_exceptions=True)
    assert sorted(type(outcome).__name__ for outcome in started) == ["ChromaStore", "EmbeddingModelMismatch"]
    # A replica with the model that won joins it.
    await start("model-a:1" if isinstance(started[0], ChromaStore) else "model-b:2")


def app_with_model_b() -> FastAPI:
    """The app `python -m services.retrieval` would serve with model-b, on the data folder CAIRN_DATA_DIR names."""
    return create_app(settings(Path(os.environ["CAIRN_DATA_DIR"]), "model-b"), embedder=FakeEmbedder())


SERVE_REFUSED = """
from shared.logging import configure_logging
from shared.web import serve
from services.retrieval.settings import Settings

configure_logging("retrieval")
serve("tests.integration.retrieval.test_embedding_model_change:app_with_model_b", Settings())
"""


def test_the_served_process_refuses_in_one_line_without_a_traceback(tmp_path: Path) -> None:
    ingest_guide(tmp_path, "model-a")
    env = {**os.environ, "CAIRN_DATA_DIR": str(tmp_path), "CAIRN_SERVICE_TOKEN": TOKEN}
    env["RETRIEVAL_PORT"] = str(free_port())
    ended = subprocess.run(
        [sys.executable, "-c", SERVE_REFUSED],
        cwd=Path(__file__).parents[3], env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert ended.returncode != 0
    assert "Traceback" not in ended.stdout + ended.stderr  # uvicorn's own log lines go to stdout
    [line] = ended.stderr.splitlines()
    assert line.startswith("retrieval: cannot start: EMBEDDING_MODEL_PATH, CHROMA_COLLECTION: the collection 'guides'")


async def test_a_collection_changed_under_a_replica_is_logged_once_while_it_lasts(
    chroma_server: ChromaServer, unique: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def open_with(model_id: str) -> ChromaStore:
        store = ChromaStore(collection=unique, url=chroma_server.url, model_id=model_id)
        await store.open()
        await store.check_model(dimension=DIMENSIONS)
        return store

    def recreate(model_id: str) -> None:
        """The collection deleted and created again by a replica with `model_id`."""
        chromadb.HttpClient(host="127.0.0.1", port=chroma_server.port).delete_collection(unique)
        asyncio.run(open_with(model_id))

    def mismatches() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "was built with another embedding model" in r.getMessage()]

    serving = await open_with("model-a:1")
    await asyncio.to_thread(recreate, "model-b:2")
    for _ in range(5):  # the first call finds the collection gone, the next ones reconnect and find model-b
        with pytest.raises(DependencyUnavailable):
            await serving.list_documents()
    assert len(mismatches()) == 1 and mismatches()[0].levelname == "ERROR"

    await asyncio.to_thread(recreate, "model-a:1")  # the collection is this replica's model's again
    for _ in range(2):  # one call may find the collection gone again before reconnecting
        with contextlib.suppress(DependencyUnavailable):
            await serving.list_documents()
    assert await serving.list_documents() == []
    await asyncio.to_thread(recreate, "model-b:2")
    for _ in range(3):
        with pytest.raises(DependencyUnavailable):
            await serving.list_documents()
    assert len(mismatches()) == 2  # a new mismatch after a time without one is logged again
