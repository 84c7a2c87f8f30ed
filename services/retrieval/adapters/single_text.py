"""One text at a time through the model's fp32 ONNX export instead of PyTorch.

For one short query, PyTorch's eager execution spends more on dispatching its few hundred operators than
on arithmetic: a 15-token SciFact query took 6.1 ms through `SentenceTransformer.encode`, 5.0 ms through
the transformer called directly, and 2.4 ms through onnxruntime running the same fp32 weights (two
threads each; cosine to encode's vectors 0.9999998 or more). The PyTorch encoder sends small groups of
texts here one at a time and keeps large batches (embedder.py, ONE_BY_ONE). The path is used only after a
check at load time that it gives encode's vectors; otherwise the PyTorch encoder keeps every call.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from services.retrieval.adapters.onnx_embedder import OnnxEncoder
from services.retrieval.adapters.onnx_export import ensure_fp32_model

log = logging.getLogger("cairn.retrieval.embedder")

# Cosine against encode's vector that the check at load time demands (float32 arithmetic in another order).
MIN_COSINE = 0.99999
_CHECK_TEXTS = ("What is the TTL of a session?", "retrieval " * 400)  # the second one is truncated


def single_text_encoder(model: Any, model_path: Path, *, models_dir: Path, threads: int) -> OnnxEncoder | None:
    """The fp32 ONNX copy of `model` (a loaded SentenceTransformer), exported into `models_dir` on first use,
    or None when it cannot be exported or loaded, or does not reproduce `model.encode`'s unit vectors
    (another pooling, a prompt, a Dense layer...)."""
    try:
        encoder = OnnxEncoder.from_file(
            model_path, onnx_path=ensure_fp32_model(model_path, models_dir=models_dir), threads=threads, spinning=True
        )
        expected = model.encode(list(_CHECK_TEXTS), normalize_embeddings=True, show_progress_bar=False)
        worst = min(float(np.dot(encoder.encode([text])[0], row)) for text, row in zip(_CHECK_TEXTS, expected))
    except Exception as exc:  # an unusual model, or onnx missing: PyTorch does every encode
        log.warning("single-text path not used", extra={"error": f"{type(exc).__name__}: {exc}"})
        return None
    if worst < MIN_COSINE:
        log.warning("single-text path differs from encode: not used", extra={"cosine": worst})
        return None
    return encoder
