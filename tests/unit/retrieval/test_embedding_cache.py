"""The persistent embedding cache: encode a text once per model, read it back afterwards."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from services.retrieval.embedding_cache import CachingEmbedder, model_fingerprint
from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit


class CountingEmbedder(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.document_calls: list[list[str]] = []
        self.query_calls = 0

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls.append(list(texts))
        return await super().embed_documents(texts)

    async def embed_query(self, text: str) -> list[float]:
        self.query_calls += 1
        return await super().embed_query(text)


def cache(inner: FakeEmbedder, path: Path, model_id: str = "fake:torch") -> CachingEmbedder:
    return CachingEmbedder(inner, path=path / "cache.sqlite3", model_id=model_id)


async def test_only_unseen_texts_are_encoded_and_order_is_kept(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    embedder = cache(inner, tmp_path)
    first = await embedder.embed_documents(["alpha beta", "gamma", "alpha beta"])
    assert inner.document_calls == [["alpha beta", "gamma"]], "a duplicate inside one call is encoded once"
    assert (embedder.stats.hits, embedder.stats.misses) == (0, 3)
    again = await embedder.embed_documents(["gamma", "delta", "alpha beta"])
    assert inner.document_calls[-1] == ["delta"]
    expected = [first[1], await FakeEmbedder().embed_query("delta"), first[0]]
    assert np.allclose(again, expected, atol=1e-7), "float32 storage keeps the vector"
    assert (embedder.stats.hits, embedder.stats.misses) == (2, 4)


async def test_cached_vectors_survive_a_restart(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    first = await cache(inner, tmp_path).embed_documents(["persisted text"])
    reopened_inner = CountingEmbedder()
    reopened = cache(reopened_inner, tmp_path)
    assert np.allclose(await reopened.embed_documents(["persisted text"]), first, atol=1e-7)
    assert reopened_inner.document_calls == []


async def test_another_model_id_does_not_reuse_vectors(tmp_path: Path) -> None:
    await cache(CountingEmbedder(), tmp_path, "model-a:torch").embed_documents(["shared text"])
    other = CountingEmbedder()
    await cache(other, tmp_path, "model-a:onnx-int8").embed_documents(["shared text"])
    assert other.document_calls == [["shared text"]]


async def test_queries_and_token_counts_go_to_the_wrapped_embedder(tmp_path: Path) -> None:
    inner = CountingEmbedder()
    embedder = cache(inner, tmp_path)
    assert await embedder.embed_query("a query") == await FakeEmbedder().embed_query("a query")
    assert inner.query_calls == 1 and inner.document_calls == []
    assert embedder.count_tokens("three little words") == 3
    assert embedder.max_tokens == inner.max_tokens


async def test_many_texts_are_looked_up_in_batches(tmp_path: Path) -> None:
    texts = [f"text number {i}" for i in range(1200)]  # more than one SQL lookup batch
    inner = CountingEmbedder()
    embedder = cache(inner, tmp_path)
    vectors = await embedder.embed_documents(texts)
    assert np.allclose(await embedder.embed_documents(texts), vectors, atol=1e-7)
    assert len(inner.document_calls) == 1 and embedder.stats.hits == 1200


def test_a_model_id_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CachingEmbedder(FakeEmbedder(), path=tmp_path / "c.sqlite3", model_id="")


def test_the_fingerprint_changes_with_the_model_files_and_the_backend(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    torch_id = model_fingerprint(model, backend="torch")
    assert torch_id.startswith("model:torch:")
    assert model_fingerprint(model, backend="onnx-int8") != torch_id
    assert model_fingerprint(model, backend="torch") == torch_id
    (model / "weights.bin").write_bytes(b"\0" * 10)
    assert model_fingerprint(model, backend="torch") != torch_id


def test_two_models_with_the_same_name_and_file_sizes_do_not_share_vectors(tmp_path: Path) -> None:
    """Two fine-tunings of one model saved as runs/a/model and runs/b/model (or one retrained in place):
    same names, same file sizes, other weights. Sharing a fingerprint, the second would be scored with the
    first one's cached vectors."""
    first, second = tmp_path / "a" / "model", tmp_path / "b" / "model"
    for folder, weights in ((first, b"\1" * 64), (second, b"\2" * 64)):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(weights)
    assert model_fingerprint(first, backend="torch") != model_fingerprint(second, backend="torch")
    (first / "model.safetensors").write_bytes(b"\2" * 64)
    assert model_fingerprint(first, backend="torch") == model_fingerprint(second, backend="torch"), "same files, same id"


def test_the_service_reuses_cached_vectors_when_embedding_cache_is_on(tmp_path: Path) -> None:
    auth = {"X-Service-Token": "cache-token"}
    document = {"text": "# Tides\n\nThe moon pulls the sea.", "doc_id": "tides.md"}
    for enabled, expected_calls in ((True, 1), (False, 2)):
        inner = CountingEmbedder()
        settings = Settings(service_token="cache-token", data_dir=tmp_path / str(enabled), embedding_cache=enabled)
        with TestClient(create_app(settings, embedder=inner, store=FakeStore())) as client:
            assert client.post("/documents", json=document, headers=auth).json()["status"] == "added"
            assert client.delete("/documents/tides.md", headers=auth).status_code == 200
            assert client.post("/documents", json=document, headers=auth).json()["status"] == "added"
        assert len(inner.document_calls) == expected_calls, f"EMBEDDING_CACHE={enabled}"
        assert (tmp_path / str(enabled) / "embedding-cache.sqlite3").exists() is enabled


async def test_a_corrupt_cache_file_costs_encodes_not_the_ingest(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The file only saves encodes: a damaged one (a disk error, a copy cut short) stopped retrieval at start with
    a traceback, and one damaged while it ran failed every ingest with 500."""
    (tmp_path / "cache.sqlite3").write_bytes(b"not a database " * 600)
    inner = CountingEmbedder()
    vectors = await cache(inner, tmp_path).embed_documents(["alpha", "beta"])
    assert np.allclose(vectors, await FakeEmbedder().embed_documents(["alpha", "beta"]), atol=1e-7)
    assert inner.document_calls == [["alpha", "beta"]]
    assert "embedding cache unreadable" in caplog.text and "embedding cache unwritable" in caplog.text


async def test_a_locked_cache_file_costs_encodes_not_the_ingest(tmp_path: Path) -> None:
    """Another process holding the file (a backup tool, sqlite3 left open in a shell) failed every ingest with 500."""
    warm = cache(CountingEmbedder(), tmp_path)
    await warm.embed_documents(["alpha"])
    warm.close()
    holder = sqlite3.connect(tmp_path / "cache.sqlite3", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        inner = CountingEmbedder()
        embedder = CachingEmbedder(inner, path=tmp_path / "cache.sqlite3", model_id="fake:torch", lock_timeout_s=0.2)
        vectors = await embedder.embed_documents(["alpha", "beta"])
        assert np.allclose(vectors, await FakeEmbedder().embed_documents(["alpha", "beta"]), atol=1e-7)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    calls = len(inner.document_calls)
    await embedder.embed_documents(["beta"])
    assert len(inner.document_calls) == calls + 1, "a vector not kept while the file was locked is encoded again"
    await embedder.embed_documents(["beta"])
    assert len(inner.document_calls) == calls + 1, "and kept once the file is free"


def test_the_service_starts_and_ingests_on_a_corrupt_cache_file(tmp_path: Path) -> None:
    auth = {"X-Service-Token": "cache-token"}
    tmp_path.joinpath("embedding-cache.sqlite3").write_bytes(b"not a database " * 600)
    settings = Settings(service_token="cache-token", data_dir=tmp_path, embedding_cache=True)
    with TestClient(create_app(settings, embedder=CountingEmbedder(), store=FakeStore())) as client:
        added = client.post("/documents", json={"text": "# Tides\n\nThe moon pulls the sea.", "doc_id": "t.md"}, headers=auth)
        assert added.status_code == 200 and added.json()["status"] == "added", added.text
