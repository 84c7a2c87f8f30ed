"""The int8 ONNX backend: onnxruntime and the `tokenizers` library, no torch at run time.

Same tokenizer file, same window (max_seq_length) and the same mean pooling + L2 normalisation as the
sentence-transformers model it was exported from (onnx_export.py), so vectors stay close to PyTorch's.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from services.retrieval.encoding import BatchingEmbedder

log = logging.getLogger("cairn.retrieval.embedder")

# An ingest batch of 64 mixed chunks padded to its longest wastes about a quarter of the encode on
# padding; run shortest-first in groups of 32 instead. Measured on SciFact 128-token chunks, batches of
# 64: groups of 16 or 32 encoded 10-25 % more chunks/s than one group of 64 (the machine was loaded).
# int8 activations are quantised per group, so a vector moves slightly with its group (cosine ~0.994).
SUB_BATCH = 32


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _check_mean_pooling(model_path: Path) -> None:
    modules = _read_json(model_path / "modules.json") or []
    pooling = next((m for m in modules if m.get("type", "").endswith("Pooling")), None)
    config = _read_json(model_path / (pooling["path"] if pooling else "1_Pooling") / "config.json")
    modes = {k for k, v in config.items() if k.startswith("pooling_mode_") and v}
    if modes and modes != {"pooling_mode_mean_tokens"}:
        raise ValueError(f"the onnx-int8 backend supports mean pooling only; {model_path.name} uses {sorted(modes)}")


class OnnxEncoder:
    """An Encoder (encoding.py) running an exported model with onnxruntime."""

    backend = "onnx-int8"

    def __init__(self, model_path: Path, *, models_dir: Path, threads: int = 2) -> None:
        from services.retrieval.adapters.onnx_export import ensure_int8_model

        started = time.perf_counter()
        onnx_path = ensure_int8_model(Path(model_path), models_dir=models_dir)
        self._load(Path(model_path), onnx_path=onnx_path, threads=threads)
        log.info("embedding model loaded", extra={"model_path": str(onnx_path), "backend": self.backend, "load_s": round(time.perf_counter() - started, 2)})

    @classmethod
    def from_file(cls, model_path: Path, *, onnx_path: Path, threads: int = 2, spinning: bool = False) -> OnnxEncoder:
        """Load an already exported file (the export's own self-check and the single-text path use this).
        `spinning`: idle workers spin between steps; see `_load`."""
        encoder = cls.__new__(cls)
        encoder._load(Path(model_path), onnx_path=onnx_path, threads=threads, spinning=spinning)
        return encoder

    def _load(self, model_path: Path, *, onnx_path: Path, threads: int, spinning: bool = False) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        if threads < 1:
            raise ValueError("threads must be >= 1")
        if not (model_path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"no tokenizer.json in {model_path}: the onnx-int8 backend needs a fast tokenizer file")
        _check_mean_pooling(model_path)
        window = int(_read_json(model_path / "sentence_bert_config.json").get("max_seq_length", 512))
        self.model_name = model_path.name
        self._max_tokens = window - 2  # [CLS] and [SEP]

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        # By default idle workers sleep instead of spinning: on a small shared CPU spinning steals the event
        # loop's core. A lone query is the exception: waking sleeping workers cost it 3.3 ms against 2.4.
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        # Spinning only inside a run: 32 clients searching through the gateway cost retrieval 9.2-9.6 ms of
        # CPU per search this way, 10.8-10.9 ms with workers spinning on between runs (same latency alone).
        options.add_session_config_entry("session.force_spinning_stop", "1")
        self._session = onnxruntime.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}

        # The file's own truncation and padding (128, fixed, for MiniLM) are not what sentence-transformers
        # uses: it truncates at max_seq_length and pads to the longest text of the batch.
        self._tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._pad_id = int((self._tokenizer.padding or {}).get("pad_id", 0))
        self._tokenizer.enable_truncation(max_length=window)
        self._tokenizer.no_padding()  # padded per group in _run
        self._counter = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._counter.no_truncation()
        self._counter.no_padding()
        self._counter_lock = threading.Lock()

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def encode(self, texts: list[str], *, sub_batch: int = SUB_BATCH) -> list[list[float]]:
        if not texts:
            return []
        encodings = self._tokenizer.encode_batch(texts)
        size = max(1, sub_batch)
        # Shortest first, in groups padded to their own longest, so short chunks don't pay for long ones.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids)) if size < len(texts) else list(range(len(texts)))
        vectors = np.empty((len(texts), 0), dtype=np.float32)
        for start in range(0, len(order), size):
            group = order[start : start + size]
            pooled = self._run([encodings[i] for i in group])
            if vectors.shape[1] == 0:
                vectors = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            vectors[group] = pooled
        return vectors.tolist()

    def _run(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            n = len(e.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = e.ids, e.attention_mask, e.type_ids
        ids[mask == 0] = self._pad_id
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = types
        (hidden,) = self._session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)

    def count_tokens(self, text: str) -> int:
        with self._counter_lock:
            return len(self._counter.encode(text, add_special_tokens=False).ids)


class OnnxEmbedder(BatchingEmbedder):
    """The onnx-int8 backend as an Embedder; exports and caches the model under `models_dir` on first use.
    `batching` goes to BatchingEmbedder (batch_size, cache_size, ...)."""

    def __init__(self, model_path: Path, *, models_dir: Path, threads: int = 2, **batching: Any) -> None:
        super().__init__(lambda: OnnxEncoder(model_path, models_dir=models_dir, threads=threads), **batching)
