"""The publisher's outbox: events accepted from a request and not yet confirmed by the broker.

Events are kept in a local SQLite file (see outbox_stores.py for what survives what). A local file was
chosen over a Redis list because the Redis Cairn uses keeps nothing on disk and may itself be down when
the broker is; the file adds no second dependency.

When the file cannot be written (disk full, read-only, missing directory) events go to an in-memory
queue instead and an error is logged: the request still succeeds, but those events are lost if the
process dies before the broker takes them or the file takes them back. The drainer moves them to the
file, oldest first, before each window once the file takes writes again, and `close` tries once more.
A file that could not even be opened at start is opened again the same way, at most every
`REOPEN_EVERY_S` seconds (and once more by `close`): events are no longer memory-only for the whole life
of a process that started while its directory was missing or not writable.

Events of the file the broker confirmed but the file cannot delete are skipped until it can, so that
the events after them still go out; should the process stop first, they are sent again at the next
start (the consumer is idempotent). Meanwhile new events go to memory, as after a failed write, and stay
there: a file that takes appends but refuses deletions (a disk filling and freeing by turns) would
otherwise keep growing with sent events nobody counts. The outbox holds at most `max_events`; beyond
that new events are refused with an error log and counted in `cairn_events_dropped_total`, and nothing
already held is discarded.
"""
from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import Counter, Gauge

from shared.outbox_stores import EventStore, MemoryEventStore, PendingEvent, SqliteEventStore

__all__ = ["EVENTS_DROPPED", "OUTBOX_EVENTS", "Outbox", "PendingEvent", "open_outbox"]

log = logging.getLogger(__name__)

REOPEN_EVERY_S = 5.0  # between two attempts to open a file that could not be opened

OUTBOX_EVENTS = Gauge("cairn_outbox_events", "Events held by the publisher until the broker confirms them", ["service"])
EVENTS_DROPPED = Counter(
    "cairn_events_dropped_total", "Events refused or lost by the publisher", ["service", "reason"]
)


class Outbox:
    """A bounded outbox over a durable store, falling back to memory when the store cannot be written.

    Once a write fails, new events go to memory until the memory queue has been drained, so events
    still leave in the order they came: everything in the file is older than anything in memory.
    """

    def __init__(
        self,
        *,
        durable: EventStore | None,
        max_events: int,
        service: str,
        open_durable: Callable[[], EventStore] | None = None,
    ) -> None:
        """`open_durable`, given when `durable` could not be opened, is tried again by the drainer."""
        if max_events <= 0:
            raise ValueError("max_events must be positive")
        self._durable = durable
        self._open_durable = open_durable if durable is None else None
        self._next_open_at = time.monotonic() + REOPEN_EVERY_S
        self._memory = MemoryEventStore()
        self._sent: set[int] = set()  # ids of events in the file the broker confirmed but the file still holds
        # Every event of the file up to `_read_from` is in `_sent`, so reads of the file start after it;
        # `_sent_ahead` are the ids of `_sent` beyond it. Without this each window would read again every
        # sent event before it: draining a backlog while the disk is full would cost reads in n².
        self._read_from = 0
        self._sent_ahead: set[int] = set()
        self._max_events = max_events
        self._service = service
        self._report()

    @property
    def service(self) -> str:
        return self._service

    @property
    def durable(self) -> bool:
        """True while new events go to the durable store."""
        return self._durable is not None and len(self._memory) == 0 and not self._sent

    def put(self, event: PendingEvent) -> bool:
        """Keep the event; False (logged and counted) when the outbox is full."""
        if len(self) >= self._max_events:
            EVENTS_DROPPED.labels(self._service, "outbox_full").inc()
            log.error("event outbox full, event refused", extra={"event_id": event.event_id, "held": len(self)})
            return False
        if self.durable:
            try:
                self._durable.put(event)
                self._report()
                return True
            except (OSError, sqlite3.Error) as exc:
                log.error("event outbox file not writable, holding events in memory", extra={"error": repr(exc)})
        self._memory.put(event)
        self._report()
        return True

    def oldest(self, limit: int) -> list[PendingEvent]:
        """The next events to send, oldest first: the durable store's, then memory's."""
        if self._open_durable is not None and time.monotonic() >= self._next_open_at:
            self._open_file()
        if len(self._memory) and self._durable is not None and not self._sent:
            # Called between two windows of the drainer, so no event of memory is in flight now.
            self._move_memory_to_file()
        if self._waiting_in_file():
            events = self._durable.oldest(limit + len(self._sent_ahead), after=self._read_from)
            for event in events:  # sent events at the head are passed for good
                if event.id not in self._sent_ahead:
                    break
                self._read_from = event.id
                self._sent_ahead.discard(event.id)
            return [e for e in events if e.id not in self._sent][:limit]
        return self._memory.oldest(limit)

    def remove(self, events: list[PendingEvent]) -> None:
        """Forget events the broker confirmed. They all come from one `oldest` call, so from one store."""
        ids = [e.id for e in events]
        if not self._waiting_in_file():
            self._memory.remove(ids)
            ids = []
        if ids or self._sent:
            self._delete_sent(ids)
        self._report()

    def _delete_sent(self, ids: list[int]) -> None:
        """Delete from the file the confirmed events `ids` and those an earlier failure left there."""
        try:
            self._durable.remove([*self._sent, *ids])
        except (OSError, sqlite3.Error) as exc:
            self._sent.update(ids)
            self._sent_ahead.update(ids)
            if ids:
                log.error(
                    "event outbox file cannot delete sent events, skipping them until it can",
                    extra={"error": repr(exc), "sent": len(self._sent)},
                )
            return
        self._sent.clear()
        self._sent_ahead.clear()
        self._read_from = 0  # an emptied file may hand out its ids again

    def _waiting_in_file(self) -> int:
        return len(self._durable) - len(self._sent) if self._durable is not None else 0

    def __len__(self) -> int:
        return len(self._memory) + self._waiting_in_file()

    def _open_file(self) -> None:
        """Open the file that could not be opened before; its events, if any, are older than memory's."""
        self._next_open_at = time.monotonic() + REOPEN_EVERY_S
        try:
            self._durable = self._open_durable()
        except (OSError, sqlite3.Error):
            return
        self._open_durable = None
        log.info(
            "event outbox file opened, events kept there from now on",
            extra={"held_in_file": len(self._durable), "held_in_memory": len(self._memory)},
        )
        self._report()

    def _move_memory_to_file(self) -> None:
        """Write the events held in memory to the file, oldest first, as far as the file takes them."""
        moved = []
        for event in self._memory.oldest(len(self._memory)):
            try:
                self._durable.put(event)
            except (OSError, sqlite3.Error):
                break
            moved.append(event.id)
        if moved:
            self._memory.remove(moved)
            log.info("event outbox file writable again, events moved there from memory", extra={"moved": len(moved)})
            self._report()

    def close(self) -> None:
        if self._open_durable is not None:
            self._open_file()
        if len(self._memory) and self._durable is not None:
            self._move_memory_to_file()  # even past sent events the file cannot delete: kept beats lost
        if lost := len(self._memory):
            EVENTS_DROPPED.labels(self._service, "shutdown").inc(lost)
            log.error("events held in memory are lost at shutdown", extra={"lost": lost})
        if self._durable is not None:
            self._durable.close()

    def checkpoint_due(self) -> bool:
        return self._durable is not None and self._durable.checkpoint_due()

    def checkpoint(self) -> None:
        """Blocking file I/O: run it in a worker thread."""
        if self._durable is not None:
            try:
                self._durable.checkpoint()
            except (OSError, sqlite3.Error) as exc:
                log.warning("event outbox checkpoint failed", extra={"error": repr(exc)})

    def _report(self) -> None:
        OUTBOX_EVENTS.labels(self._service).set(len(self))


def open_outbox(*, path: Path, max_events: int, service: str) -> Outbox:
    """The outbox in the file at `path`, or in memory (logged as an error) until the file can be opened."""
    try:
        durable: EventStore | None = SqliteEventStore(path)
    except (OSError, sqlite3.Error) as exc:
        log.error(
            "event outbox file cannot be opened, holding events in memory until it can",
            extra={"path": str(path), "error": repr(exc), "retry_every_s": REOPEN_EVERY_S},
        )
        durable = None
    outbox = Outbox(
        durable=durable, max_events=max_events, service=service, open_durable=lambda: SqliteEventStore(path)
    )
    if len(outbox):
        log.info("event outbox resumes with events from an earlier run", extra={"path": str(path), "held": len(outbox)})
    return outbox
