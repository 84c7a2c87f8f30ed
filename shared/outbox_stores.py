"""Where the outbox keeps pending events: a SQLite file (WAL journal, synchronous=NORMAL), or memory.

Every `put` on the file is one INSERT committed before it returns, so an event survives a crash or
`kill -9` of the process. It does not survive a power loss or an operating-system crash, which can take
the last transactions not yet copied from the write-ahead log into the database file: syncing every
commit to disk would cost a disk flush per event on every request.

The file keeps a count of its events in memory. A second process writing the same file (forbidden, see
docs/operations.md) makes that count wrong; the store notices when the table disagrees with it, logs a
warning and counts again, so that sharing costs at most events sent twice.
"""
from __future__ import annotations

import logging
import sqlite3
from collections import deque
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

log = logging.getLogger(__name__)

_SCHEMA_VERSION = 1
CHECKPOINT_EVERY = 500  # commits between two copies of the write-ahead log into the database file
_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    exchange TEXT NOT NULL,
    routing_key TEXT NOT NULL,
    body BLOB NOT NULL
)
"""


@dataclass(frozen=True)
class PendingEvent:
    """One serialised event and where it goes. `id` orders the outbox (0 until stored)."""

    event_id: str
    event_type: str
    occurred_at: str
    exchange: str
    routing_key: str
    body: bytes
    id: int = 0


class EventStore(Protocol):
    """Where pending events wait. `put` raises OSError or sqlite3.Error when it cannot keep the event."""

    def put(self, event: PendingEvent) -> None: ...

    def oldest(self, limit: int, after: int = 0) -> list[PendingEvent]:
        """Up to `limit` events, oldest first, those with an id above `after` only."""
        ...

    def remove(self, ids: list[int]) -> None: ...

    def __len__(self) -> int: ...

    def close(self) -> None: ...

    def checkpoint_due(self) -> bool: ...

    def checkpoint(self) -> None: ...


class SqliteEventStore:
    """Pending events in a SQLite file; opening it creates the file, its directory and the table."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit: every statement is its own transaction. The publisher's event loop is the only user.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=0.1)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # SQLite's own checkpoint would run inside an unlucky `put` and flush the disk there (tens of
            # ms); the publisher runs `checkpoint` in a worker thread instead.
            self._db.execute("PRAGMA wal_autocheckpoint=0")
            self._db.execute("PRAGMA journal_size_limit=4194304")  # the log file shrinks back after a burst
            self._db.execute(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
            (self._count,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()
        except sqlite3.Error:
            self._db.close()
            raise
        self.path = path
        self._commits = 0
        self._shared_warned = False

    def put(self, event: PendingEvent) -> None:
        self._db.execute(
            "INSERT INTO outbox (event_id, event_type, occurred_at, exchange, routing_key, body) VALUES (?, ?, ?, ?, ?, ?)",
            (event.event_id, event.event_type, event.occurred_at, event.exchange, event.routing_key, event.body),
        )
        self._count += 1
        self._commits += 1

    def oldest(self, limit: int, after: int = 0) -> list[PendingEvent]:
        rows = self._db.execute(
            "SELECT event_id, event_type, occurred_at, exchange, routing_key, body, id FROM outbox WHERE id > ? "
            "ORDER BY id LIMIT ?",
            (after, limit),
        ).fetchall()
        if not after and len(rows) < limit and len(rows) != self._count:  # the whole table, and not what we counted
            self._recount()
        return [PendingEvent(*row) for row in rows]

    def remove(self, ids: list[int]) -> None:
        if ids:
            removed = self._db.execute(f"DELETE FROM outbox WHERE id IN ({','.join('?' * len(ids))})", ids).rowcount
            self._count -= removed
            self._commits += 1
            if removed != len(ids) or self._count < 0:  # another process deleted or added events
                self._recount()

    def _recount(self) -> None:
        if not self._shared_warned:
            self._shared_warned = True
            log.warning(
                "event outbox file changed by another process: give each process its own OUTBOX_PATH",
                extra={"path": str(self.path)},
            )
        (self._count,) = self._db.execute("SELECT count(*) FROM outbox").fetchone()

    def __len__(self) -> int:
        return self._count

    def close(self) -> None:
        self._db.close()

    def checkpoint_due(self) -> bool:
        return self._commits >= CHECKPOINT_EVERY

    def checkpoint(self) -> None:
        """Copy the write-ahead log into the database file so the log can start over. A passive
        checkpoint on a connection of its own: it may run in another thread while events are appended."""
        self._commits = 0
        with closing(sqlite3.connect(self.path, timeout=1)) as db:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)")


class MemoryEventStore:
    """Pending events in memory: lost with the process. The fallback, and the store of tests and tools."""

    def __init__(self) -> None:
        self._events: deque[PendingEvent] = deque()
        self._next_id = 1

    def put(self, event: PendingEvent) -> None:
        self._events.append(replace(event, id=self._next_id))
        self._next_id += 1

    def oldest(self, limit: int, after: int = 0) -> list[PendingEvent]:
        if after:
            return [e for e in self._events if e.id > after][:limit]
        return [self._events[i] for i in range(min(limit, len(self._events)))]

    def remove(self, ids: list[int]) -> None:
        gone = set(ids)
        while self._events and self._events[0].id in gone:  # the usual case: the oldest were confirmed
            gone.discard(self._events.popleft().id)
        if gone:
            self._events = deque(e for e in self._events if e.id not in gone)

    def __len__(self) -> int:
        return len(self._events)

    def close(self) -> None:
        pass

    def checkpoint_due(self) -> bool:
        return False

    def checkpoint(self) -> None:
        pass
