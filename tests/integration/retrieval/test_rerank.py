"""RERANK_MODEL with a real (tiny, randomly initialised) sentence-transformers CrossEncoder saved by the test."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.retrieval.main import create_app
from services.retrieval.settings import Settings
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.integration

TOKEN = "integration-token"
AUTH = {"X-Service-Token": TOKEN}
WORDS = "backups run nightly kept thirty days restore archive invoices sent monthly billing contact the a and of".split()
DOCS = [
    "Backups run nightly.",
    "Backups are kept thirty days.",
    "Restore the nightly archive.",
    "Invoices are sent monthly.",
    "The billing contact gets invoices.",
    "Backups and invoices and the archive.",
]


def save_tiny_cross_encoder(path: Path, *, num_labels: int = 1, head: bool = True) -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizer

    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    torch.manual_seed(7)
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64, num_labels=num_labels, initializer_range=0.3,
    )
    (BertForSequenceClassification if head else BertModel)(config).save_pretrained(path)
    BertTokenizer(vocab=vocab).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture
def client(tmp_path: Path, tiny_cross_encoder: Path) -> Iterator[TestClient]:
    settings = Settings(service_token=TOKEN, data_dir=tmp_path, rerank_model=tiny_cross_encoder, rerank_candidates=6)
    with TestClient(create_app(settings, embedder=FakeEmbedder(), store=FakeStore())) as client:
        for i, text in enumerate(DOCS):
            assert client.post("/documents", json={"text": text, "doc_id": f"d{i}"}, headers=AUTH).status_code == 200
        yield client


def test_rerank_orders_by_the_cross_encoders_scores(client: TestClient, tiny_cross_encoder: Path) -> None:
    from sentence_transformers import CrossEncoder

    query = "backups archive invoices"
    plain = client.post("/search", json={"query": query, "top_k": 6, "rerank": False}, headers=AUTH).json()["results"]
    reranked = client.post("/search", json={"query": query, "top_k": 6}, headers=AUTH).json()["results"]
    assert {r["chunk_id"] for r in reranked} == {r["chunk_id"] for r in plain} and len(plain) >= 4

    expected = CrossEncoder(str(tiny_cross_encoder), device="cpu").predict([(query, r["content"]) for r in plain])
    by_chunk = {r["chunk_id"]: float(score) for r, score in zip(plain, expected)}
    assert len(set(by_chunk.values())) == len(by_chunk), "the random model must tell the passages apart"
    assert [r["chunk_id"] for r in reranked] == sorted(by_chunk, key=by_chunk.get, reverse=True)
    for result in reranked:
        assert result["rerank_score"] == pytest.approx(by_chunk[result["chunk_id"]], abs=1e-5)
    assert [r["chunk_id"] for r in reranked] != [r["chunk_id"] for r in plain], "the test needs an order rerank changes"
    assert all(r["rerank_score"] is None for r in plain)


def test_a_classifier_with_several_labels_is_refused(tmp_path: Path) -> None:
    """Which of its outputs means "relevant" is the model's own convention: ranking by the first one
    could put the least relevant chunks first."""
    from services.retrieval.adapters.reranker import CrossEncoderReranker

    with pytest.raises(ValueError, match="RERANK_MODEL.*one relevance score.*gives 2"):
        CrossEncoderReranker(save_tiny_cross_encoder(tmp_path, num_labels=2))


def not_a_cross_encoder(tmp_path: Path) -> Path:
    folder = tmp_path / "models"  # say, the folder above the model's
    folder.mkdir()
    return folder


@pytest.mark.parametrize(
    ("model", "reason"),
    [(not_a_cross_encoder, "cannot be loaded as a sentence-transformers CrossEncoder"),
     (lambda tmp_path: save_tiny_cross_encoder(tmp_path / "classifier", num_labels=2), "one relevance score"),
     # sentence-transformers loads it with a new, random scoring head: every search's order would be noise
     (lambda tmp_path: save_tiny_cross_encoder(tmp_path / "encoder", head=False), "has no trained relevance head")],
    ids=["not a model", "a classifier", "an embedding model"],
)
def test_an_unusable_model_stops_the_start_with_one_line_naming_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model, reason: str
) -> None:
    """The line `cairn up` shows when retrieval exits at start; without it, only "see the log"."""
    settings = Settings(service_token=TOKEN, data_dir=tmp_path / "data", rerank_model=model(tmp_path))
    with pytest.raises(ValueError), TestClient(create_app(settings, embedder=FakeEmbedder(), store=FakeStore())):
        pass
    lines = [line for line in capsys.readouterr().err.splitlines() if ": cannot start: " in line]
    assert len(lines) == 1 and lines[0].startswith("retrieval: cannot start: RERANK_MODEL: "), lines
    assert reason in lines[0]
