"""One text at a time through the model's fp32 ONNX export instead of PyTorch.

For one short query, PyTorch's eager execution spends more on dispatching its few hundred operators than
on arithmetic: a 15-token SciFact query took 6.1 ms through `SentenceTransformer.encode`, 5.0 ms through
the transformer called directly, and 2.4 ms through onnxruntime running the same fp32 weights (two
threads each; cosine to encode's vectors 0.9999998 or more). The PyTorch encoder sends small groups of
texts here one at a time and keeps large batches (embedder.py, ONE_BY_ONE). The path is used only after a
check at load time that it gives encode's vectors; otherwise the PyTorch encoder keeps every call.
"""
from __future__ import annotations

import itertools
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from services.retrieval.adapters.onnx_embedder import OnnxEncoder
from services.retrieval.adapters.onnx_export import ensure_fp32_model

log = logging.getLogger("cairn.retrieval.embedder")

# Cosine against encode's vector that the check at load time demands (float32 arithmetic in another order).
MIN_COSINE = 0.99999
_CHECK_TEXTS = ("What is the TTL of a session?", "retrieval " * 400)  # the second one is truncated


# Copies whose export failed in this process, which asks only once: the service exports before it loads
# the model (embedder.export_onnx_copy), and the encoder asks again; a failing export may take minutes.
_FAILED: set[tuple[Path, Path]] = set()


def fp32_copy(model_path: Path, *, models_dir: Path) -> Path | None:
    """The model's fp32 ONNX file in `models_dir`, exported on first use; None when it cannot be exported."""
    key = (Path(model_path).resolve(), Path(models_dir).resolve())
    if key in _FAILED:
        return None
    try:
        return ensure_fp32_model(model_path, models_dir=models_dir)
    except Exception as exc:  # an unusual model, or onnx missing: PyTorch does every encode
        _FAILED.add(key)
        log.warning("single-text path not used", extra={"error": f"{type(exc).__name__}: {exc}"})
        return None


def single_text_encoder(model: Any, model_path: Path, *, onnx_path: Path, threads: int) -> OnnxEncoder | None:
    """The fp32 copy at `onnx_path` (from `fp32_copy`) of `model` (a loaded SentenceTransformer), or None
    when it cannot be loaded or does not reproduce `model.encode`'s unit vectors (another pooling, a
    prompt, a Dense layer...)."""
    try:
        encoder = OnnxEncoder.from_file(model_path, onnx_path=onnx_path, threads=threads, spinning=True)
        expected = model.encode(list(_CHECK_TEXTS), normalize_embeddings=True, show_progress_bar=False)
        worst = min(float(np.dot(encoder.encode([text])[0], row)) for text, row in zip(_CHECK_TEXTS, expected))
    except Exception as exc:
        log.warning("single-text path not used", extra={"error": f"{type(exc).__name__}: {exc}"})
        return None
    if worst < MIN_COSINE:
        log.warning("single-text path differs from encode: not used", extra={"cosine": worst})
        return None
    return encoder


class SideBySide:
    """Texts one at a time through a single-threaded copy of the encoder, on two threads at once: the
    caller's and a helper. A query is a few dozen tokens, too little work to share between threads inside
    one run; a run per thread keeps both cores busy without the threads waiting on each other. SciFact
    queries: 10.5 ms of CPU each this way against 13.2 through the two-threaded copy one after another,
    1.3 times the queries per second (same vectors: the same fp32 file)."""

    def __init__(self, encoder: OnnxEncoder) -> None:
        self._encoder = encoder
        self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-side")

    @classmethod
    def load(cls, model_path: Path, *, onnx_path: Path) -> SideBySide:
        """Over the fp32 copy at `onnx_path`, which `single_text_encoder` has checked."""
        return cls(OnnxEncoder.from_file(model_path, onnx_path=onnx_path, threads=1))

    def encode(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors in order. Each thread takes the next text not yet taken: the call ends when the last
        text is done, and a thread that the CPU's other work slows down takes fewer texts, where a fixed half
        each left the other thread idle at the end (12 SciFact queries beside a process using 40 % of a
        core: 40-44 ms against 46-48 ms)."""
        vectors: list[list[float]] = [[] for _ in texts]
        turns = itertools.count()  # next() on it is atomic: no text is taken twice

        def take_turns() -> None:
            while (index := next(turns)) < len(texts):
                vectors[index] = self._encoder.encode([texts[index]])[0]

        helping = self._helper.submit(take_turns) if len(texts) > 1 else None
        take_turns()
        if helping is not None:
            helping.result()
        return vectors
