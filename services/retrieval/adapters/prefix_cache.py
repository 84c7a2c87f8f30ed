"""Contextual prefixes in a small SQLite file, so re-ingesting the same content calls no model.

The file only saves model calls: one that cannot be read or written (locked past its timeout, corrupt,
on a full disk) is logged and treated as empty, so the ingest goes on, as it does when the model fails.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS prefixes (
    model TEXT NOT NULL,
    document_sha TEXT NOT NULL,
    chunk_sha TEXT NOT NULL,
    prefix TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (datetime('now')),
    PRIMARY KEY (model, document_sha, chunk_sha)
)
"""


class SqlitePrefixCache:
    """Implements ports.PrefixCache; one connection guarded by a lock, used from worker threads."""

    def __init__(self, path: Path) -> None:
        self._path = Path(path)
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _db(self) -> sqlite3.Connection:
        if self._connection is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self._path, check_same_thread=False, timeout=10)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SCHEMA)
            self._connection = connection
        return self._connection

    def _get(self, model: str, document_sha: str, chunk_shas: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        with self._lock:
            db = self._db()
            for start in range(0, len(chunk_shas), 500):  # stay under SQLite's bound-variable limit
                batch = chunk_shas[start : start + 500]
                rows = db.execute(
                    f"SELECT chunk_sha, prefix FROM prefixes WHERE model = ? AND document_sha = ? "
                    f"AND chunk_sha IN ({','.join('?' * len(batch))})",
                    [model, document_sha, *batch],
                )
                found.update(rows.fetchall())
        return found

    def _put(self, model: str, document_sha: str, prefixes: dict[str, str]) -> None:
        with self._lock:
            db = self._db()
            with db:
                db.executemany(
                    "INSERT OR REPLACE INTO prefixes (model, document_sha, chunk_sha, prefix) VALUES (?, ?, ?, ?)",
                    [(model, document_sha, sha, prefix) for sha, prefix in prefixes.items()],
                )

    async def get_many(self, *, model: str, document_sha: str, chunk_shas: list[str]) -> dict[str, str]:
        if not chunk_shas:
            return {}
        try:
            return await asyncio.to_thread(self._get, model, document_sha, chunk_shas)
        except sqlite3.Error as exc:
            log.warning("contextual prefix cache unreadable; prefixes asked of the model", extra=self._failure(exc))
            return {}

    async def put_many(self, *, model: str, document_sha: str, prefixes: dict[str, str]) -> None:
        if not prefixes:
            return
        try:
            await asyncio.to_thread(self._put, model, document_sha, prefixes)
        except sqlite3.Error as exc:
            log.warning("contextual prefix cache unwritable; prefixes not kept", extra=self._failure(exc))

    def _failure(self, exc: sqlite3.Error) -> dict[str, str]:
        return {"path": str(self._path), "error": str(exc)[:200]}

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
