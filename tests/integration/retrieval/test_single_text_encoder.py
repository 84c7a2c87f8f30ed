"""The single-text path of the PyTorch encoder (the model's fp32 ONNX copy) gives SentenceTransformer.encode's vectors."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from services.retrieval.adapters import onnx_export
from services.retrieval.adapters.embedder import ONE_BY_ONE, SentenceTransformerEmbedder
from services.retrieval.adapters.single_text import MIN_COSINE, fp32_copy, single_text_encoder
from services.retrieval.settings import Settings

pytestmark = pytest.mark.integration

TEXTS = [
    "What is the TTL of a session?",
    "0-dimensional biomaterials show inductive properties.",
    "Ünïcödé façade — naïve café in 東京, ½ price!",
    "a",
    "",
    "retrieval augmented generation " * 200,  # far past the 256-token cap: truncated like encode truncates
]


def test_the_shipped_model_uses_the_single_text_path(embedder: SentenceTransformerEmbedder) -> None:
    assert embedder.encoder._single is not None


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_one_text_gets_encodes_vector(embedder: SentenceTransformerEmbedder, text: str) -> None:
    encoder = embedder.encoder
    expected = encoder._model.encode([text], normalize_embeddings=True, show_progress_bar=False)[0]
    (vector,) = encoder.encode([text])
    assert len(vector) == len(expected)
    assert float(np.dot(vector, expected)) >= MIN_COSINE
    assert float(np.linalg.norm(vector)) == pytest.approx(1.0, abs=1e-5)


def test_small_groups_go_one_by_one_and_large_batches_through_pytorch(
    embedder: SentenceTransformerEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoder = embedder.encoder
    calls: list[tuple[str, int]] = []
    for name, copy in (("single", encoder._single), ("side", encoder._side_by_side._encoder)):
        copy_encode = copy.encode
        monkeypatch.setattr(copy, "encode", lambda texts, n=name, e=copy_encode: calls.append((n, len(texts))) or e(texts))
    texts = [f"how do I rotate the service token, take {n}?" for n in range(ONE_BY_ONE + 1)]
    (lone,) = encoder.encode(texts[:1])
    assert calls == [("single", 1)], "a lone query runs through the two-threaded copy"
    calls.clear()
    small = encoder.encode(texts[:ONE_BY_ONE])
    assert calls == [("side", 1)] * ONE_BY_ONE, "a group runs one text at a time on two threads side by side"
    calls.clear()
    large = encoder.encode(texts)
    assert calls == [], "a batch larger than ONE_BY_ONE is PyTorch's"
    assert float(np.dot(lone, small[0])) >= MIN_COSINE
    for alone, batched in zip(small, large):
        assert float(np.dot(alone, batched)) >= MIN_COSINE


class _Reversed:
    """The shipped model with its vector components reversed: a copy that does not give these vectors."""

    def __init__(self, model: object) -> None:
        self._model = model

    def encode(self, texts: list[str], **options: object) -> np.ndarray:
        return self._model.encode(texts, **options)[:, ::-1]


def test_a_copy_that_differs_from_encode_is_not_used(embedder: SentenceTransformerEmbedder) -> None:
    settings = Settings()
    model = embedder.encoder._model
    copy = fp32_copy(settings.model_path(), models_dir=settings.models_dir)
    assert copy is not None
    assert single_text_encoder(model, settings.model_path(), onnx_path=copy, threads=1) is not None
    assert single_text_encoder(_Reversed(model), settings.model_path(), onnx_path=copy, threads=1) is None


def test_a_model_that_cannot_be_exported_keeps_encode(embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{}")
    assert fp32_copy(broken, models_dir=tmp_path / "models") is None
    assert list((tmp_path / "models").iterdir()) == [], "the failed export's work folder is removed"


def test_the_export_runs_in_a_child_process(tmp_path: Path) -> None:
    """Tracing and optimising the graph would leave ~300-400 MB in the service's heap for good."""
    exported = onnx_export.ensure_fp32_model(Settings().model_path(), models_dir=tmp_path / "models")
    info = json.loads((exported.parent / onnx_export.INFO_FILE).read_text())
    assert exported.name == onnx_export.FP32_FILE and info["recipe"] == onnx_export.FP32_RECIPE
    assert "onnxruntime.transformers.optimizer" not in sys.modules, "the exporter never ran in this process"
