"""What the retrieval service does at start, and in which order, with the model load faked."""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from services.retrieval import main
from services.retrieval.settings import Settings
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.unit


class LoadedModel(FakeEmbedder):
    """What embedder_from_settings returns, with the close the service owes it."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def close(self) -> None:
        self.closed = True


class ReadStore(FakeStore):
    """Records whether the whole index is read while the model loads; `fail` plays a read that breaks with
    an unexpected error."""

    def __init__(self, steps: list[str], events: dict[str, threading.Event], *, fail: bool = False) -> None:
        super().__init__()
        self.steps, self.events, self.fail = steps, events, fail

    async def get_chunks(self, **kwargs):  # type: ignore[no-untyped-def]
        self.events["index read"].set()
        # Waits (up to a limit) for the model load to begin: it only can when both run at once.
        beside = await asyncio.to_thread(self.events["model load"].wait, 5)
        self.steps.append("index read beside the model load" if beside else "index read alone")
        if self.fail:
            raise RuntimeError("unexpected")
        return await super().get_chunks(**kwargs)


@pytest.fixture
def steps() -> list[str]:
    return []


@pytest.fixture
def events() -> dict[str, threading.Event]:
    return {"index read": threading.Event(), "model load": threading.Event()}


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch, steps: list[str], events: dict[str, threading.Event]) -> LoadedModel:
    loaded = LoadedModel()

    def export(settings: Settings) -> None:
        steps.append("export")

    def load(settings: Settings) -> LoadedModel:
        events["model load"].set()
        beside = events["index read"].wait(timeout=5)
        steps.append("model loaded beside the index read" if beside else "model loaded alone")
        return loaded

    monkeypatch.setattr(main, "export_onnx_copy", export, raising=False)
    monkeypatch.setattr(main, "embedder_from_settings", load)
    return loaded


def test_the_model_loads_while_the_index_is_read_after_the_export(
    tmp_path: Path, steps: list[str], events: dict[str, threading.Event], model: LoadedModel
) -> None:
    app = main.create_app(Settings(data_dir=tmp_path), store=ReadStore(steps, events))
    with TestClient(app) as client:
        assert client.get("/readyz").status_code == 200
        assert app.state.embedder is model
    # The export (a child process peaking above 1 GB) comes before the process holds the index or the model.
    assert steps[0] == "export"
    assert sorted(steps[1:]) == ["index read beside the model load", "model loaded beside the index read"]
    assert model.closed


def test_a_start_that_fails_while_the_model_loads_closes_the_model(
    tmp_path: Path, steps: list[str], events: dict[str, threading.Event], model: LoadedModel
) -> None:
    app = main.create_app(Settings(data_dir=tmp_path), store=ReadStore(steps, events, fail=True))
    with pytest.raises(RuntimeError, match="unexpected"):
        with TestClient(app):
            pass
    assert "model loaded beside the index read" in steps
    assert model.closed, "the model loaded beside the failed index read is closed"
