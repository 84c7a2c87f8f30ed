"""sentence-transformers behind the Embedder protocol: loaded from a local directory, never the hub."""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from services.retrieval.ports import Embedder

__all__ = ["Embedder", "SentenceTransformerEmbedder"]

log = logging.getLogger("cairn.retrieval.embedder")


class SentenceTransformerEmbedder:
    """Encodes on one dedicated worker thread so the event loop never waits on torch.

    Construct it off the event loop (loading takes seconds): `await asyncio.to_thread(SentenceTransformerEmbedder, ...)`.
    """

    def __init__(self, model_path: Path, *, threads: int = 2, batch_size: int = 64, cache_size: int = 1024) -> None:
        if batch_size < 1 or threads < 1 or cache_size < 0:
            raise ValueError("batch_size and threads must be >= 1, cache_size >= 0")
        if not Path(model_path).is_dir():
            raise FileNotFoundError(f"embedding model directory not found: {model_path}")
        # Without these, a missing file makes transformers retry the hub for about a minute.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers import AutoTokenizer

        started = time.perf_counter()
        torch.set_num_threads(threads)
        self._model = SentenceTransformer(str(model_path), device="cpu")
        # A second tokenizer for counting: the model's own is busy on the encode thread and
        # fast tokenizers must not be shared across threads.
        self._counter = AutoTokenizer.from_pretrained(str(model_path))
        self._counter_lock = threading.Lock()
        self._max_tokens = int(self._model.max_seq_length) - 2  # [CLS] and [SEP]
        self._batch_size = batch_size
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._cache_size = cache_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self.model_name = Path(model_path).name
        log.info("embedding model loaded", extra={"model_path": str(model_path), "load_s": round(time.perf_counter() - started, 2)})

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def _encode(self, texts: list[str]) -> list[list[float]]:
        vectors = self._model.encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return vectors.tolist()

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        vectors: list[list[float]] = []
        # One executor job per batch, so queries arriving during a long ingest wait one batch, not all.
        for start in range(0, len(texts), self._batch_size):
            vectors += await loop.run_in_executor(self._executor, self._encode, texts[start : start + self._batch_size])
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        if (cached := self._cache.get(text)) is not None:
            self._cache.move_to_end(text)
            return cached
        (vector,) = await asyncio.get_running_loop().run_in_executor(self._executor, self._encode, [text])
        if self._cache_size:
            self._cache[text] = vector
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return vector

    def count_tokens(self, text: str) -> int:
        with self._counter_lock:
            return len(self._counter(text, add_special_tokens=False, verbose=False)["input_ids"])

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
