from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.retrieval.settings import Settings
from shared.settings import settings_or_exit

pytestmark = pytest.mark.unit


def test_defaults_work_on_one_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RETRIEVAL_PORT", "RETRIEVAL_HOST", "CHROMA_URL", "EMBEDDING_MODEL_PATH", "CAIRN_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert (settings.host, settings.port, settings.chroma_url) == ("127.0.0.1", 8002, None)
    assert settings.chroma_path == Path("data") / "chroma"
    assert (settings.model_path() / "config.json").is_file(), "the packaged MiniLM is installed"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RETRIEVAL_PORT", "9102")
    monkeypatch.setenv("CHROMA_URL", "http://127.0.0.1:8999")
    monkeypatch.setenv("EMBEDDING_MODEL_PATH", str(tmp_path))
    monkeypatch.setenv("CHUNK_SIZE_TOKENS", "128")
    settings = Settings()
    assert (settings.port, settings.chroma_url, settings.chunk_size_tokens) == (9102, "http://127.0.0.1:8999", 128)
    assert settings.model_path() == tmp_path


@pytest.mark.parametrize(
    ("variable", "field"),
    [("RERANK_MODEL", "rerank_model"), ("EMBEDDING_MODEL_PATH", "embedding_model_path"), ("MODELS_DIR", "models_folder")],
)
def test_an_empty_folder_variable_means_unset(monkeypatch: pytest.MonkeyPatch, variable: str, field: str) -> None:
    """`RERANK_MODEL=` in a .env file, or `""` in a ConfigMap, turns the setting off, as an empty CHROMA_URL does;
    read as a path it was the working directory: a reranker or embedding model loaded from it, ONNX copies kept in it."""
    monkeypatch.setenv(variable, "")
    assert getattr(Settings(), field) is None


def test_overlap_must_be_smaller_than_the_chunk() -> None:
    with pytest.raises(ValidationError):
        Settings(chunk_size_tokens=64, chunk_overlap_tokens=64)


@pytest.mark.parametrize("name", ["p", "my docs", "-cairn", "cairn.", "a..b", "10.0.0.1", "x" * 505])
def test_a_collection_name_chroma_refuses_is_refused_when_settings_are_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # "x" * 505 fits Chroma's rule, but the "-changes" collection Cairn keeps beside it does not.
    monkeypatch.setenv("CHROMA_COLLECTION", name)
    with pytest.raises(SystemExit):
        settings_or_exit("retrieval", Settings)
    problem = capsys.readouterr().err.strip()
    assert problem.startswith("retrieval: cannot start: CHROMA_COLLECTION: ") and "collection name" in problem
    assert "\n" not in problem


def test_the_longest_collection_name_chroma_takes_with_its_changes_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHROMA_COLLECTION", "x" * 504)
    assert Settings().chroma_collection == "x" * 504
