"""An outbox file on a disk that filled up, for the outbox's unit and integration tests."""
from __future__ import annotations

import sqlite3

from shared.outbox_stores import PendingEvent, SqliteEventStore


class FullDisk(SqliteEventStore):
    """A real outbox file whose writes fail once `full` is set: it can be read, but neither appended to nor
    deleted from, as when the disk fills up."""

    full = False

    def put(self, event: PendingEvent) -> None:
        if self.full:
            raise sqlite3.OperationalError("database or disk is full")
        super().put(event)

    def remove(self, ids: list[int]) -> None:
        if self.full and ids:
            raise sqlite3.OperationalError("database or disk is full")
        super().remove(ids)
