"""Embedding settings and the ONNX export's cache key, without loading a model."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.retrieval.adapters.onnx_embedder import OnnxEncoder, _check_mean_pooling
from services.retrieval.adapters import onnx_export
from services.retrieval.adapters.onnx_export import ensure_fp32_model, ensure_int8_model, source_digest
from services.retrieval.main import create_app
from services.retrieval.settings import Settings

pytestmark = pytest.mark.unit


def test_backend_and_batching_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EMBEDDING_BACKEND", "onnx-int8")
    monkeypatch.setenv("EMBED_BATCH_WINDOW_MS", "2.5")
    monkeypatch.setenv("EMBED_MAX_QUERY_BATCH", "1")
    monkeypatch.setenv("CAIRN_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("MODELS_DIR", raising=False)
    settings = Settings()
    assert (settings.embedding_backend, settings.embed_batch_window_ms, settings.embed_max_query_batch) == ("onnx-int8", 2.5, 1)
    assert settings.models_dir == tmp_path / "models"
    monkeypatch.setenv("MODELS_DIR", str(tmp_path / "shared"))
    assert Settings().models_dir == tmp_path / "shared"


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("EMBEDDING_BACKEND", "EMBED_BATCH_WINDOW_MS", "EMBED_MAX_QUERY_BATCH"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert (settings.embedding_backend, settings.embed_batch_window_ms, settings.embed_max_query_batch) == ("torch", 0.0, 32)


@pytest.mark.parametrize(
    ("name", "value"),
    [("EMBEDDING_BACKEND", "tensorflow"), ("EMBED_BATCH_WINDOW_MS", "-1"), ("EMBED_MAX_QUERY_BATCH", "0")],
)
def test_bad_values_stop_the_service_at_start_up(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name):
        create_app()


def _fake_model(directory: Path, *, pooling: dict[str, bool] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text("{}")
    (directory / "modules.json").write_text(json.dumps([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (directory / "1_Pooling").mkdir(exist_ok=True)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps(pooling or {"pooling_mode_mean_tokens": True}))
    return directory


def test_the_export_cache_key_follows_the_model_files(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    before = source_digest(model)
    assert source_digest(model) == before
    (model / "config.json").write_text('{"hidden_size": 8}')
    assert source_digest(model) != before, "a changed model must export again"


def test_a_cached_export_is_reused_without_exporting(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    cached = tmp_path / "models" / f"m-{source_digest(model)[:16]}" / "model-int8.onnx"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"stand-in")  # exporting this fake model would fail: reaching it proves the cache hit
    assert ensure_int8_model(model, models_dir=tmp_path / "models") == cached


def test_an_export_that_loses_the_race_to_another_replica_uses_the_winners_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _fake_model(tmp_path / "m")
    winner = tmp_path / "models" / f"m-{source_digest(model, recipe=onnx_export.FP32_RECIPE)[:16]}" / onnx_export.FP32_FILE

    def export_while_another_replica_finishes_first(model_path: Path, out_dir: Path, *, quantise: bool) -> dict[str, object]:
        winner.parent.mkdir(parents=True)
        winner.write_bytes(b"the other replica's export")
        (out_dir / onnx_export.FP32_FILE).write_bytes(b"this replica's export")
        return {}

    monkeypatch.setattr(onnx_export, "run_export", export_while_another_replica_finishes_first)
    assert ensure_fp32_model(model, models_dir=tmp_path / "models") == winner
    assert winner.read_bytes() == b"the other replica's export"
    assert [p.name for p in (tmp_path / "models").iterdir()] == [winner.parent.name], "the loser's work folder is removed"


def test_only_mean_pooling_models_are_accepted(tmp_path: Path) -> None:
    _check_mean_pooling(_fake_model(tmp_path / "mean"))
    with pytest.raises(ValueError, match="mean pooling only"):
        _check_mean_pooling(_fake_model(tmp_path / "cls", pooling={"pooling_mode_cls_token": True}))


def test_a_model_without_a_fast_tokenizer_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        OnnxEncoder.from_file(_fake_model(tmp_path / "m"), onnx_path=tmp_path / "none.onnx")


def test_a_failed_fp32_export_is_not_tried_again_by_the_same_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The service exports before it loads the model, and the encoder asks for the copy again.
    from services.retrieval.adapters.single_text import fp32_copy

    model = _fake_model(tmp_path / "m")
    attempts = []

    def failing_export(model_path: Path, out_dir: Path, *, quantise: bool) -> dict[str, object]:
        attempts.append(out_dir)
        raise RuntimeError("onnx export of m failed: no onnx here")

    monkeypatch.setattr(onnx_export, "run_export", failing_export)
    assert fp32_copy(model, models_dir=tmp_path / "models") is None
    assert fp32_copy(model, models_dir=tmp_path / "models") is None
    assert len(attempts) == 1
    assert fp32_copy(model, models_dir=tmp_path / "other-models") is None
    assert len(attempts) == 2, "another models folder is another copy"
