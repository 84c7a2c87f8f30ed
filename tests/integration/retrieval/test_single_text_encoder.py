"""The single-text path of the PyTorch encoder gives SentenceTransformer.encode's vectors."""
from __future__ import annotations

import numpy as np
import pytest

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.adapters.single_text import MIN_COSINE, SingleTextEncoder

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


def test_batches_still_go_through_encode(embedder: SentenceTransformerEmbedder) -> None:
    encoder = embedder.encoder
    vectors = encoder.encode(TEXTS[:3])
    alone = [encoder.encode([text])[0] for text in TEXTS[:3]]
    for batched, single in zip(vectors, alone):
        assert float(np.dot(batched, single)) >= MIN_COSINE


class Transformer:  # named like the sentence-transformers modules for_model inspects
    pass


class Pooling:
    def __init__(self, mode: str) -> None:
        self.pooling_mode = mode


def test_other_model_shapes_keep_encode() -> None:
    for modules in ([Transformer(), Pooling("cls")], [Transformer()], [Transformer(), Pooling("mean"), object()]):
        assert SingleTextEncoder.for_model(_Model(modules)) is None
    assert SingleTextEncoder.for_model(_Model([Transformer(), Pooling("mean")], prompt="query: ")) is None


class _Model(list):
    """Just enough of a SentenceTransformer for for_model's shape check."""

    def __init__(self, modules: list[object], prompt: str = "") -> None:
        super().__init__(modules)
        self.prompts = {"query": prompt}
        self.default_prompt_name = "query" if prompt else None
