"""The publisher's outbox on a real SQLite file: order, restarts, the memory fallback and the bound."""
from __future__ import annotations

import logging
import sqlite3
import statistics
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from shared.outbox import Outbox, open_outbox
from shared.outbox_stores import CHECKPOINT_EVERY, MemoryEventStore, PendingEvent, SqliteEventStore
from tests.outbox_doubles import FullDisk

pytestmark = pytest.mark.unit


def pending(n: int, exchange: str = "cairn.events") -> PendingEvent:
    return PendingEvent(
        event_id=str(uuid.uuid4()),
        event_type="QuerySubmitted",
        occurred_at="2025-01-01T00:00:00+00:00",
        exchange=exchange,
        routing_key="analytics.query.submitted",
        body=f'{{"n": {n}}}'.encode(),
    )


def bodies(events: list[PendingEvent]) -> list[bytes]:
    return [e.body for e in events]


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_events_come_back_oldest_first_and_leave_once_removed(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "outbox.sqlite3")
    events = [pending(n) for n in range(5)]
    for event in events:
        store.put(event)
    first = store.oldest(3)
    assert bodies(first) == bodies(events[:3])
    assert [e.event_id for e in first] == [e.event_id for e in events[:3]]
    store.remove([e.id for e in first[:2]])
    assert bodies(store.oldest(10)) == bodies(events[2:])
    assert len(store) == 3


def test_the_file_keeps_its_events_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "chat.sqlite3"
    store = SqliteEventStore(path)
    events = [pending(n, exchange=f"x{n}") for n in range(3)]
    for event in events:
        store.put(event)
    store.remove([store.oldest(1)[0].id])
    store.close()

    reopened = SqliteEventStore(path)
    assert len(reopened) == 2
    again = reopened.oldest(10)
    assert [(e.event_id, e.exchange, e.routing_key, e.body) for e in again] == [
        (e.event_id, e.exchange, e.routing_key, e.body) for e in events[1:]
    ]
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_checkpoint_copies_the_log_into_the_database_file(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "outbox.sqlite3")
    for n in range(CHECKPOINT_EVERY):
        store.put(pending(n))
    assert store.checkpoint_due()
    store.checkpoint()
    assert not store.checkpoint_due()
    copy = tmp_path / "copy.sqlite3"  # the database file alone, without its write-ahead log
    copy.write_bytes((tmp_path / "outbox.sqlite3").read_bytes())
    assert sqlite3.connect(copy).execute("SELECT count(*) FROM outbox").fetchone() == (CHECKPOINT_EVERY,)


def test_an_append_commits_in_well_under_a_millisecond(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "outbox.sqlite3")
    event = pending(0)
    durations = []
    for _ in range(500):
        started = time.perf_counter()
        store.put(event)
        durations.append(time.perf_counter() - started)
    median_ms = statistics.median(durations) * 1000
    print(f"outbox append median {median_ms * 1000:.0f} µs, p99 {sorted(durations)[494] * 1e6:.0f} µs")
    assert median_ms < 0.5


def test_an_unwritable_path_falls_back_to_memory_and_says_so(tmp_path: Path, caplog) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the outbox directory should be")
    caplog.set_level(logging.ERROR, logger="shared.outbox")
    outbox = open_outbox(path=blocker / "chat.sqlite3", max_events=10, service="unit-unwritable")
    assert "cannot be opened" in caplog.text
    assert not outbox.durable
    assert outbox.put(pending(1)) and outbox.put(pending(2))
    assert bodies(outbox.oldest(10)) == [b'{"n": 1}', b'{"n": 2}']
    assert sample("cairn_outbox_events", service="unit-unwritable") == 2


def test_a_file_that_could_not_be_opened_at_start_keeps_the_events_once_it_can(tmp_path: Path, caplog) -> None:
    """Its directory missing at start and creatable later: the events of memory are not lost at shutdown."""
    blocker = tmp_path / "outbox"
    blocker.write_text("a file where the outbox directory should be")
    outbox = open_outbox(path=blocker / "chat.sqlite3", max_events=10, service="unit-opened-late")
    assert outbox.put(pending(1)) and outbox.put(pending(2))
    blocker.unlink()
    caplog.set_level(logging.INFO, logger="shared.outbox")
    outbox.close()
    assert "event outbox file opened" in caplog.text
    assert sample("cairn_events_dropped_total", service="unit-opened-late", reason="shutdown") is None
    assert bodies(open_outbox(path=blocker / "chat.sqlite3", max_events=10, service="unit").oldest(10)) == [
        b'{"n": 1}', b'{"n": 2}'
    ]


def test_a_file_that_cannot_be_opened_is_tried_again_at_a_bounded_rate(monkeypatch) -> None:
    monkeypatch.setattr("shared.outbox.REOPEN_EVERY_S", 0.2)
    attempts = []

    def refuse() -> SqliteEventStore:
        attempts.append(time.monotonic())
        raise OSError("read-only file system")

    outbox = Outbox(durable=None, max_events=10, service="unit-reopen-rate", open_durable=refuse)
    outbox.put(pending(1))
    deadline = time.monotonic() + 0.7
    while time.monotonic() < deadline:  # a drainer retrying as fast as it can
        assert bodies(outbox.oldest(10)) == [b'{"n": 1}']
    assert 2 <= len(attempts) <= 4, len(attempts)


def test_a_write_failure_moves_new_events_to_memory_and_keeps_their_order(tmp_path: Path, caplog) -> None:
    disk = FullDisk(tmp_path / "outbox.sqlite3")
    outbox = Outbox(durable=disk, max_events=100, service="unit-full")
    outbox.put(pending(1))
    disk.full = True
    caplog.set_level(logging.ERROR, logger="shared.outbox")
    assert outbox.put(pending(2)) and outbox.put(pending(3))
    assert "not writable" in caplog.text and not outbox.durable
    disk.full = False
    outbox.put(pending(4))  # memory still holds newer events than the file: stays in memory, after them

    sent = []
    while batch := outbox.oldest(2):
        sent += bodies(batch)
        outbox.remove(batch)
    assert sent == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}', b'{"n": 4}']
    assert outbox.durable  # memory drained: back to the file
    outbox.put(pending(5))
    assert len(disk) == 1


def test_sent_events_the_full_file_cannot_delete_are_skipped_until_it_can(tmp_path: Path, caplog) -> None:
    disk = FullDisk(tmp_path / "outbox.sqlite3")
    outbox = Outbox(durable=disk, max_events=100, service="unit-undeletable")
    for n in (1, 2, 3):
        outbox.put(pending(n))
    disk.full = True
    outbox.put(pending(4))  # to memory, behind the file's events
    caplog.set_level(logging.ERROR, logger="shared.outbox")

    sent = []
    while batch := outbox.oldest(2):
        sent += bodies(batch)
        outbox.remove(batch)
    assert sent == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}', b'{"n": 4}']  # each once, the file's not repeated
    assert "cannot delete sent events" in caplog.text
    assert (len(outbox), len(disk)) == (0, 3)  # still in the file, sent again should the process stop now

    disk.full = False
    outbox.put(pending(5))
    outbox.remove(outbox.oldest(10))
    assert (len(outbox), len(disk)) == (0, 0)  # the next deletion takes the ones left behind


def test_a_file_that_takes_events_but_cannot_delete_them_does_not_grow_past_the_bound(tmp_path: Path) -> None:
    """A disk that fills and frees by turns: appends get through, deletions fail. The file must not keep
    taking new events behind sent ones it cannot delete, which would grow it past max_events unseen."""
    disk = FullDisk(tmp_path / "outbox.sqlite3")
    outbox = Outbox(durable=disk, max_events=20, service="unit-undeletable-growth")
    sent = []
    for round_ in range(10):
        disk.full = False  # space for a few appends...
        for n in range(5):
            assert outbox.put(pending(round_ * 5 + n))
        batch = outbox.oldest(5)
        disk.full = True  # ...gone again by the time the broker confirms
        outbox.remove(batch)
        sent += bodies(batch)
    assert sent == [f'{{"n": {n}}}'.encode() for n in range(50)]  # each once, in order
    assert len(outbox) == 0
    assert len(disk) <= 20  # the file holds no more than the outbox's bound
    disk.full = False
    outbox.put(pending(50))
    outbox.remove(outbox.oldest(10))
    assert (len(outbox), len(disk)) == (0, 0)


class CountingFullDisk(FullDisk):
    rows_read = 0

    def oldest(self, limit: int, after: int = 0) -> list[PendingEvent]:
        rows = super().oldest(limit, after)
        self.rows_read += len(rows)
        return rows


def test_draining_a_file_that_cannot_delete_reads_each_event_a_bounded_number_of_times(tmp_path: Path) -> None:
    """Sent events left in the file were read again by every later window: draining a backlog of n events
    while the disk was full read ~n²/200 rows (20,000 events: 14 s, 70 ms per window on the event loop)."""
    disk = CountingFullDisk(tmp_path / "outbox.sqlite3")
    outbox = Outbox(durable=disk, max_events=10_000, service="unit-undeletable-reads")
    for n in range(3000):
        outbox.put(pending(n))
    disk.full = True
    drained = 0
    while batch := outbox.oldest(100):
        drained += len(batch)
        outbox.remove(batch)
    assert drained == 3000 and len(disk) == 3000
    assert disk.rows_read <= 3 * 3000, disk.rows_read


def test_a_full_outbox_refuses_new_events_counts_them_and_keeps_the_old(tmp_path: Path, caplog) -> None:
    outbox = open_outbox(path=tmp_path / "outbox.sqlite3", max_events=3, service="unit-bound")
    kept = [pending(n) for n in range(3)]
    assert all(outbox.put(e) for e in kept)
    caplog.set_level(logging.ERROR, logger="shared.outbox")
    assert not outbox.put(pending(99)) and not outbox.put(pending(100))
    assert "outbox full" in caplog.text
    assert sample("cairn_events_dropped_total", service="unit-bound", reason="outbox_full") == 2
    assert bodies(outbox.oldest(10)) == bodies(kept)
    outbox.remove(outbox.oldest(1))
    assert outbox.put(pending(3))  # room again


def test_the_gauge_follows_the_outbox_size(tmp_path: Path) -> None:
    outbox = open_outbox(path=tmp_path / "outbox.sqlite3", max_events=10, service="unit-gauge")
    for n in range(4):
        outbox.put(pending(n))
    assert sample("cairn_outbox_events", service="unit-gauge") == 4
    outbox.remove(outbox.oldest(3))
    assert sample("cairn_outbox_events", service="unit-gauge") == 1
    outbox.close()
    assert sample("cairn_outbox_events", service="unit-gauge") == 1  # what the file still holds
    assert len(open_outbox(path=tmp_path / "outbox.sqlite3", max_events=10, service="unit-gauge")) == 1


def test_events_held_in_memory_at_shutdown_are_counted_as_lost() -> None:
    outbox = Outbox(durable=None, max_events=10, service="unit-memory")
    outbox.put(pending(1))
    outbox.close()
    assert sample("cairn_events_dropped_total", service="unit-memory", reason="shutdown") == 1


def test_the_memory_store_removes_any_confirmed_subset() -> None:
    store = MemoryEventStore()
    for n in range(5):
        store.put(pending(n))
    ids = [e.id for e in store.oldest(5)]
    store.remove([ids[0], ids[2]])  # the middle one failed to confirm, say
    assert bodies(store.oldest(5)) == [b'{"n": 1}', b'{"n": 3}', b'{"n": 4}']


def test_a_non_positive_bound_is_refused() -> None:
    with pytest.raises(ValueError):
        Outbox(durable=None, max_events=0, service="unit")
