"""The LLM stand-in the chat integration tests call over HTTP (see llm_stand_in.py)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.chat.llm_stand_in import Script, llm_stand_in
from tests.support import serve_in_thread


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[str, Script]]:
    """The stand-in served for one test module: its base URL and its script."""
    app, script = llm_stand_in()
    with serve_in_thread(app) as url:
        yield url, script


@pytest.fixture
def script(model) -> Script:
    """The stand-in's script, reset for each test."""
    return model[1].reset()
