"""A real Chroma server for retrieval tests (the embedding model comes from tests/integration/conftest.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.retrieval.chroma_server import ChromaServer


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server"))
    server.start()
    yield server
    server.stop()
