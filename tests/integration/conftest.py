"""Fixtures shared by the integration tests of several services."""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.settings import Settings


@pytest.fixture(scope="session")
def embedder(shared_model_exports: None) -> Iterator[SentenceTransformerEmbedder]:
    """The real embedding model, loaded once per test session."""
    started = time.perf_counter()
    settings = Settings()
    model = SentenceTransformerEmbedder(settings.model_path(), threads=2, batch_size=64, models_dir=settings.models_dir)
    print(f"\nembedding model loaded in {time.perf_counter() - started:.1f}s")
    yield model
    model.close()
