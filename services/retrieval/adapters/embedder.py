"""The embedding model behind the Embedder protocol: PyTorch (sentence-transformers) or ONNX Runtime int8.

Both load from a local directory, never the hub, and run inside a BatchingEmbedder (one worker thread,
micro-batched queries, LRU). Construct off the event loop: loading takes seconds.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from services.retrieval.encoding import QUERIES_PER_CALL, BatchingEmbedder
from services.retrieval.ports import Embedder

if TYPE_CHECKING:
    from services.retrieval.settings import Settings

__all__ = [
    "BACKENDS", "Embedder", "SentenceTransformerEmbedder", "TorchEncoder", "configure_thread_pools",
    "embedder_from_settings", "export_onnx_copy",
]

Backend = Literal["torch", "onnx-int8"]
BACKENDS: tuple[str, ...] = ("torch", "onnx-int8")

log = logging.getLogger("cairn.retrieval.embedder")

# Up to this many texts (a query micro-batch's call) go one at a time through the fp32 ONNX copy rather
# than in one PyTorch call; ingest batches are larger. SciFact queries, ms per query: one at a time 2.4;
# in onnxruntime calls of 4 / 8 / 16 (sorted by length) 2.6 / 3.1 / 3.4; in PyTorch calls of 4 / 8 / 16
# 3.4 / 3.2 / 3.3.
ONE_BY_ONE = QUERIES_PER_CALL


def configure_thread_pools() -> None:
    """Keep numpy's BLAS pool to one thread; the model's own threads are set by each encoder.

    The encode already keeps every core busy; a BLAS pool of the same size running beside it (numpy
    products in search or evaluation) made a query encode much slower on 2 cores.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def prepare_local_loading() -> None:
    """Before transformers loads a model from a local folder (the embedder, the reranker)."""
    # Without these, a missing file makes transformers retry the hub for about a minute.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers.utils import logging as transformers_logging  # transformers alone: no torch yet

    # Its "Loading weights" bar goes to stderr even when that is a file: a line that is not JSON in
    # the service's log under `cairn up`, and a bar in the file `cairn eval 2>file` writes.
    transformers_logging.disable_progress_bar()


class TorchEncoder:
    """sentence-transformers on the CPU with `threads` intra-op threads. With `models_dir`, a call of up to
    ONE_BY_ONE texts (queries, mostly) runs them one at a time through the model's fp32 ONNX copy exported
    there (single_text.py), in about half the time; two or more of them run side by side on two threads."""

    backend = "torch"

    def __init__(self, model_path: Path, *, threads: int = 2, batch_size: int = 64, models_dir: Path | None = None) -> None:
        if threads < 1 or batch_size < 1:
            raise ValueError("threads and batch_size must be >= 1")
        if not Path(model_path).is_dir():
            raise FileNotFoundError(f"embedding model directory not found: {model_path}")
        prepare_local_loading()
        from services.retrieval.adapters.single_text import SideBySide, fp32_copy, single_text_encoder

        started = time.perf_counter()
        # Exported (in a child process, on a first start) before this process loads PyTorch and the model,
        # so that the two processes do not both hold them: the start's peak memory stays near the serving one.
        onnx_path = fp32_copy(Path(model_path), models_dir=models_dir) if models_dir else None
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers import AutoTokenizer

        torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(model_path), device="cpu")
        # A second tokenizer for counting: the model's own is busy on the encode thread and
        # fast tokenizers must not be shared across threads.
        self._counter = AutoTokenizer.from_pretrained(str(model_path))
        self._counter_lock = threading.Lock()
        self._max_tokens = int(self._model.max_seq_length) - 2  # [CLS] and [SEP]
        self._batch_size = batch_size
        self._single = (
            single_text_encoder(self._model, Path(model_path), onnx_path=onnx_path, threads=threads) if onnx_path else None
        )
        # Several queries at once (a micro-batch) run side by side, one per thread; see SideBySide.
        self._side_by_side = (
            SideBySide.load(Path(model_path), onnx_path=onnx_path) if self._single is not None and threads >= 2 else None
        )
        self.model_name = Path(model_path).name
        log.info("embedding model loaded", extra={"model_path": str(model_path), "backend": self.backend, "load_s": round(time.perf_counter() - started, 2)})

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def encode(self, texts: list[str]) -> list[list[float]]:
        if len(texts) <= ONE_BY_ONE and self._single is not None:
            if len(texts) > 1 and self._side_by_side is not None:
                return self._side_by_side.encode(texts)
            return [self._single.encode([text])[0] for text in texts]
        vectors = self._model.encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return vectors.tolist()

    def count_tokens(self, text: str) -> int:
        with self._counter_lock:
            return len(self._counter(text, add_special_tokens=False, verbose=False)["input_ids"])


class SentenceTransformerEmbedder(BatchingEmbedder):
    """The PyTorch backend as an Embedder; `batching` goes to BatchingEmbedder (cache_size, ...)."""

    def __init__(
        self, model_path: Path, *, threads: int = 2, batch_size: int = 64, models_dir: Path | None = None, **batching: Any
    ) -> None:
        def load() -> TorchEncoder:
            return TorchEncoder(model_path, threads=threads, batch_size=batch_size, models_dir=models_dir)

        super().__init__(load, batch_size=batch_size, **batching)


def export_onnx_copy(settings: Settings) -> None:
    """Export the ONNX file the configured backend loads, if the models folder lacks it (a child process,
    seconds), so that embedder_from_settings then only loads. Run it before the process holds much: the
    export peaks at over 1 GB of its own. The torch backend goes on without its copy when this fails."""
    if settings.embedding_backend == "onnx-int8":
        from services.retrieval.adapters.onnx_export import ensure_int8_model

        ensure_int8_model(settings.model_path(), models_dir=settings.models_dir)
    else:
        from services.retrieval.adapters.single_text import fp32_copy

        fp32_copy(settings.model_path(), models_dir=settings.models_dir)


def embedder_from_settings(settings: Settings, *, cache_size: int | None = None) -> BatchingEmbedder:
    """The configured backend, loaded (the ONNX model is exported on first use). Blocks for seconds."""
    configure_thread_pools()
    options = {
        "batch_size": settings.embed_batch_size,
        "cache_size": settings.query_cache_size if cache_size is None else cache_size,
        "batch_window_ms": settings.embed_batch_window_ms,
        "max_query_batch": settings.embed_max_query_batch,
    }
    if settings.embedding_backend == "onnx-int8":
        from services.retrieval.adapters.onnx_embedder import OnnxEmbedder

        return OnnxEmbedder(settings.model_path(), models_dir=settings.models_dir, threads=settings.torch_threads, **options)
    return SentenceTransformerEmbedder(
        settings.model_path(), threads=settings.torch_threads, models_dir=settings.models_dir, **options
    )
