"""The change feed behind VectorStore.changes: one record per write in a side collection.

Each record names the documents one write touched, under an id "<writer>:<sequence>", so a reader
finds new records by comparing the ids it has seen with the ids stored now: no clocks involved,
except to prune records older than CHANGES_KEPT_S. A reader that could not read for longer than that
has its cursor dropped anyway (the store fails, KeywordSync resets) and reloads everything.
"""
from __future__ import annotations

import itertools
import time
import uuid
from dataclasses import dataclass
from typing import Any

CHANGES_KEPT_S = 900.0
_PRUNE_EVERY_S = 60.0
_IDS_PER_CALL = 500


def changes_collection(collection: str) -> str:
    """The side collection holding the change records of `collection`."""
    return f"{collection}-changes"


@dataclass(frozen=True)
class Cursor:
    collections: tuple[str, str]  # ids of the chunk and change collections: recreated means reload
    seen: frozenset[str]


class ChangeLog:
    """Writes and reads change records; every method takes Chroma collections and blocks (run it off the loop)."""

    def __init__(self) -> None:
        self.writer_id = uuid.uuid4().hex[:12]
        self._sequence = itertools.count(1)
        self._last_prune = 0.0

    def record(self, changes: Any, doc_ids: set[str]) -> None:
        changes.add(
            ids=[f"{self.writer_id}:{next(self._sequence):012d}"],
            embeddings=[[1.0]],  # Chroma wants a vector; nobody searches this collection
            documents=["\n".join(sorted(doc_ids))],
            metadatas=[{"writer": self.writer_id, "at": time.time()}],
        )

    def read(self, *, chunks: Any, changes: Any, cursor: object | None) -> tuple[set[str] | None, Cursor]:
        """Documents other writers touched since `cursor` (None: cannot tell), and the next cursor."""
        now = time.time()
        if now - self._last_prune > _PRUNE_EVERY_S:
            changes.delete(where={"at": {"$lt": now - CHANGES_KEPT_S}})
            self._last_prune = now
        current = Cursor((str(chunks.id), str(changes.id)), frozenset(changes.get(include=[])["ids"]))
        if not isinstance(cursor, Cursor) or cursor.collections != current.collections:
            return None, current
        mine = f"{self.writer_id}:"
        new = [record for record in current.seen - cursor.seen if not record.startswith(mine)]
        doc_ids: set[str] = set()
        for start in range(0, len(new), _IDS_PER_CALL):
            for text in changes.get(ids=new[start : start + _IDS_PER_CALL], include=["documents"])["documents"]:
                doc_ids.update(d for d in (text or "").split("\n") if d)
        return doc_ids, current
