"""A sentence-transformers CrossEncoder behind the Reranker protocol, loaded from a local directory."""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from services.retrieval.adapters.embedder import prepare_local_loading
from services.retrieval.ports import Reranker
from shared.errors import StartRefused

__all__ = ["CrossEncoderReranker", "RerankModelUnusable", "Reranker"]

log = logging.getLogger("cairn.retrieval.reranker")


class RerankModelUnusable(ValueError, StartRefused):
    """RERANK_MODEL names a folder that holds no usable reranker; the message starts with the variable."""


class CrossEncoderReranker:
    """Scores on its own worker thread. Construct it off the event loop: loading takes seconds."""

    def __init__(self, model_path: Path, *, batch_size: int = 32) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not Path(model_path).is_dir():
            raise FileNotFoundError(f"rerank model directory not found: {model_path}")
        prepare_local_loading()
        from sentence_transformers import CrossEncoder

        started = time.perf_counter()
        try:
            self._model = CrossEncoder(str(model_path), device="cpu")
        except Exception as exc:  # no config, unknown architecture, missing weights...: transformers' own types
            raise RerankModelUnusable(
                f"RERANK_MODEL: {Path(model_path).name} cannot be loaded as a sentence-transformers CrossEncoder "
                f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'})"
            ) from exc
        if (untrained := _untrained_head(self._model)) is not None:
            raise RerankModelUnusable(
                f"RERANK_MODEL: {Path(model_path).name} is not a cross-encoder: its checkpoint, a {untrained}, "
                "has no trained relevance head (an embedding model?)"
            )
        if self._model.num_labels != 1:  # which output means "relevant" is then the model's own convention
            raise RerankModelUnusable(
                f"RERANK_MODEL: a reranker must give one relevance score per passage; {Path(model_path).name} "
                f"gives {self._model.num_labels} (a classifier's labels)"
            )
        self._batch_size = batch_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rerank")
        self.model_name = Path(model_path).name
        log.info("rerank model loaded", extra={"model_path": str(model_path), "load_s": round(time.perf_counter() - started, 2)})

    def _predict(self, query: str, passages: list[str]) -> list[float]:
        scores = self._model.predict(
            [(query, passage) for passage in passages], batch_size=self._batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        return [float(s) for s in scores.reshape(len(passages))]

    async def score(self, *, query: str, passages: list[str]) -> list[float]:
        if not passages:
            return []
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._predict, query, passages)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _untrained_head(model: Any) -> str | None:
    """The architecture of a checkpoint that sentence-transformers scores through a head it just made up, None
    for a cross-encoder. A model of one transformer module scores through the checkpoint's own classifier, which
    only a ...ForSequenceClassification checkpoint has; given another (an embedding model, a bare encoder),
    sentence-transformers adds a randomly initialised one. Models with modules of their own after it (a scoring
    Dense layer, an LLM reranker's yes/no logits) bring their head."""
    if len(list(model)) != 1:
        return None
    architectures = getattr(getattr(model, "config", None), "architectures", None) or []
    if any(name.endswith("ForSequenceClassification") for name in architectures):
        return None
    return architectures[0] if architectures else "model of unnamed architecture"
