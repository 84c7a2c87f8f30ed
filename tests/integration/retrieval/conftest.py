"""The real embedding model (loaded once per session) and a real Chroma server for retrieval tests."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.settings import Settings
from tests.integration.retrieval.chroma_server import ChromaServer


@pytest.fixture(scope="session")
def embedder() -> Iterator[SentenceTransformerEmbedder]:
    started = time.perf_counter()
    model = SentenceTransformerEmbedder(Settings().model_path(), threads=2, batch_size=64)
    print(f"\nembedding model loaded in {time.perf_counter() - started:.1f}s")
    yield model
    model.close()


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server"))
    server.start()
    yield server
    server.stop()
