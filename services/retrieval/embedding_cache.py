"""A persistent cache of document embeddings in front of any Embedder.

Vectors are keyed by (model id, sha256 of the text) in one SQLite file, so re-ingesting text that was
embedded before — an unchanged corpus in `cairn eval`, the unchanged chunks of an edited document, an
index rebuilt after wiping Chroma — reads vectors instead of encoding them again. Queries are not
cached here: the wrapped embedder keeps its own in-memory LRU for those.

The file only saves encodes: one that cannot be read or written (locked past its timeout, corrupt, on a
full disk) is logged and treated as empty, so the ingest goes on, as with the contextual prefix cache.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path

from services.retrieval import metrics
from services.retrieval.ports import Embedder

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model TEXT NOT NULL,
    digest TEXT NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model, digest)
) WITHOUT ROWID
"""
_LOOKUP_BATCH = 500  # below SQLite's default limit on bound parameters


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_identity(model_dir: Path) -> str:
    """An id that changes with any byte of the model files, whichever backend runs them (the ONNX copies are
    derived from these files): the folder's name and a hash of every file's relative path and content. Sizes
    alone would miss two fine-tunings of one model, which have the same names and sizes (hashing all of
    all-MiniLM-L6-v2's 88 MB takes about 0.2 s)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(model_dir).rglob("*") if p.is_file()):
        with path.open("rb") as handle:
            content = hashlib.file_digest(handle, "sha256").hexdigest()
        digest.update(f"{path.relative_to(model_dir).as_posix()}:{content}\n".encode())
    return f"{Path(model_dir).name}:{digest.hexdigest()[:16]}"


def model_fingerprint(model_dir: Path, *, backend: str, identity: str | None = None) -> str:
    """The id cached vectors are kept under: the model's identity (given, or computed) and the backend, whose
    vectors differ a little from the other's."""
    name, digest = (identity or model_identity(model_dir)).rsplit(":", 1)
    return f"{name}:{backend}:{digest}"


class CachingEmbedder:
    """Implements Embedder around `inner`; embed_documents encodes only texts not seen before.

    Vectors are stored as float32, which is what the models produce, so a cached vector equals a
    fresh one. Safe for several processes sharing the file (SQLite WAL).
    """

    def __init__(self, inner: Embedder, *, path: Path, model_id: str, lock_timeout_s: float = 30.0) -> None:
        if not model_id:
            raise ValueError("model_id must name the model (and backend) the vectors come from")
        self._inner = inner
        self._model_id = model_id
        self.stats = CacheStats()
        self._path = Path(path)
        self._lock_timeout_s = lock_timeout_s
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        """The open connection; opened (and the table made) on first use, so a bad file fails a lookup, not the start."""
        if self._connection is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(str(self._path), check_same_thread=False, timeout=self._lock_timeout_s)
            try:
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute(_SCHEMA)
                connection.commit()
            except sqlite3.Error:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    @property
    def max_tokens(self) -> int:
        return self._inner.max_tokens

    def count_tokens(self, text: str) -> int:
        return self._inner.count_tokens(text)

    async def embed_query(self, text: str) -> list[float]:
        return await self._inner.embed_query(text)

    async def embed_documents(self, texts: list[str]) -> list[list[float]]:
        digests = [text_digest(t) for t in texts]
        try:
            found = await asyncio.to_thread(self._load, sorted(set(digests)))
        except sqlite3.Error as exc:
            log.warning("embedding cache unreadable; texts encoded again", extra=self._failure(exc))
            found = {}
        missing: dict[str, str] = {}
        for digest, text in zip(digests, texts):
            if digest not in found:
                missing.setdefault(digest, text)
        self.stats.hits += len(texts) - sum(1 for d in digests if d in missing)
        self.stats.misses += sum(1 for d in digests if d in missing)
        metrics.cache_lookups("document", hits=len(texts) - len(missing), misses=len(missing))
        if missing:
            vectors = await self._inner.embed_documents(list(missing.values()))
            fresh = dict(zip(missing, vectors, strict=True))
            try:
                await asyncio.to_thread(self._store, fresh)
            except sqlite3.Error as exc:
                log.warning("embedding cache unwritable; vectors not kept", extra=self._failure(exc))
            found |= fresh
        return [found[d] for d in digests]

    def _load(self, digests: list[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        with self._lock:
            for start in range(0, len(digests), _LOOKUP_BATCH):
                batch = digests[start : start + _LOOKUP_BATCH]
                rows = self._db().execute(
                    f"SELECT digest, vector FROM embeddings WHERE model = ? AND digest IN ({','.join('?' * len(batch))})",
                    [self._model_id, *batch],
                )
                for digest, blob in rows:
                    found[digest] = array("f", blob).tolist()
        return found

    def _store(self, vectors: dict[str, list[float]]) -> None:
        with self._lock:
            db = self._db()
            with db:  # rolled back when it fails, so the next write does not find a transaction left open
                db.executemany(
                    "INSERT OR REPLACE INTO embeddings (model, digest, vector) VALUES (?, ?, ?)",
                    [(self._model_id, digest, array("f", vector).tobytes()) for digest, vector in vectors.items()],
                )

    def _failure(self, exc: sqlite3.Error) -> dict[str, str]:
        return {"path": str(self._path), "error": str(exc)[:200]}

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
