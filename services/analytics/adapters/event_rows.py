"""Writing events: their rows in `events` and, for answers, their rows in `cited_documents`, on a
connection the caller holds in a transaction.

The statements are built once, at import, and every call passes plain parameter dicts: SQLAlchemy then
reuses one compiled statement and sends a batch as multi-row INSERTs ("insertmanyvalues"), instead of
coercing a new statement with some thirty values for each event.
"""
from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Connection, Insert, Integer, String, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from services.analytics.adapters.schema import cited_documents, events
from services.analytics.domain import EventRecord

# The record's fields that are columns of `events` (cited_documents has a table of its own).
_EVENT_COLUMNS = tuple(f.name for f in fields(EventRecord) if f.name != "cited_documents")

# Rows whose event_id is stored already are skipped; RETURNING names the rows that went in (psycopg 3
# reports no rowcount for a batch, and a returned row is certain on both backends).
_INSERT_NEW = {
    name: dialect.insert(events).on_conflict_do_nothing(index_elements=["event_id"]).returning(events.c.event_id)
    for name, dialect in (("sqlite", sqlite), ("postgresql", postgresql))
}
_INSERT_CITED = insert(cited_documents)

# What PostgreSQL would refuse, and with it the whole event, is made storable, the same on every backend so
# that their reports agree: U+0000 (which a question or a comment may carry) becomes U+FFFD, and a value
# longer than its column (a model name an LLM endpoint reports, say) is cut to fit. The payload keeps
# such a value whole, but for U+0000, which jsonb cannot hold either.
_NUL, _REPLACEMENT = "\x00", "\ufffd"
_EVENT_LIMITS = {c.name: c.type.length for c in events.columns if isinstance(c.type, String) and c.type.length}
_TEXT_COLUMNS = tuple(c.name for c in events.columns if isinstance(c.type, String | JSON) and c.name in _EVENT_COLUMNS)
# Token counts come from the LLM endpoint too: a count beyond the 32-bit column is stored as its largest value.
_INTEGER_COLUMNS = tuple(c.name for c in events.columns if isinstance(c.type, Integer) and c.name in _EVENT_COLUMNS)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_CITED_LIMITS = {c.name: c.type.length for c in cited_documents.columns if isinstance(c.type, String) and c.type.length}


def insert_records(
    conn: Connection, records: Sequence[EventRecord], *, received_at: datetime | None = None
) -> list[bool]:
    """Insert each record unless its event_id is stored already; for each record, True when it was new.
    A record whose event_id comes again later in `records` is new at most once, at its first place."""
    first_of: dict[uuid.UUID, int] = {}
    for place, record in enumerate(records):
        first_of.setdefault(record.event_id, place)
    unique = [records[place] for place in first_of.values()]
    received_at = received_at or datetime.now(UTC)
    new = _insert_events(conn, [_event_row(record, received_at) for record in unique])
    cited = [row for record in unique if record.event_id in new for row in _cited_rows(record)]
    if cited:
        conn.execute(_INSERT_CITED, cited)
    return [first_of[record.event_id] == place and record.event_id in new for place, record in enumerate(records)]


def insert_record(conn: Connection, record: EventRecord, *, received_at: datetime | None = None) -> bool:
    """Insert the record unless its event_id is stored already; True when it was new."""
    return insert_records(conn, [record], received_at=received_at)[0]


def _event_row(record: EventRecord, received_at: datetime) -> dict:
    row = {name: getattr(record, name) for name in _EVENT_COLUMNS}
    for name in _TEXT_COLUMNS:
        row[name] = _fitted(_storable(row[name]), _EVENT_LIMITS.get(name))
    for name in _INTEGER_COLUMNS:
        if row[name] is not None:
            row[name] = min(max(row[name], _INT32_MIN), _INT32_MAX)
    row["received_at"] = received_at
    return row


def _cited_rows(record: EventRecord) -> list[dict]:
    counts: Counter[str] = Counter()
    for doc_id, count in record.cited_documents:
        counts[_fitted(_storable(doc_id), _CITED_LIMITS["doc_id"])] += count  # ids cut alike count together
    request_id = _fitted(_storable(record.request_id), _CITED_LIMITS["request_id"])
    return [
        {"event_id": record.event_id, "doc_id": doc_id, "request_id": request_id, "occurred_at": record.occurred_at,
         "count": count}
        for doc_id, count in counts.items()
    ]


def _fitted(value: Any, limit: int | None) -> Any:
    return value[:limit] if limit and isinstance(value, str) and len(value) > limit else value


def _storable(value: Any) -> Any:
    """`value` with U+0000 replaced in every string, those inside dicts and lists too."""
    if isinstance(value, str):
        return value.replace(_NUL, _REPLACEMENT) if _NUL in value else value
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def _insert_events(conn: Connection, rows: list[dict]) -> set[uuid.UUID]:
    """The event_ids of `rows` that were not stored yet, now inserted."""
    if not rows:
        return set()
    statement: Insert | None = _INSERT_NEW.get(conn.dialect.name)
    if statement is not None:
        return {event_id for (event_id,) in conn.execute(statement, rows)}
    new: set[uuid.UUID] = set()
    for row in rows:  # another backend: one savepoint per row, a duplicate key rolls back only its own
        try:
            with conn.begin_nested():
                conn.execute(insert(events), row)
        except IntegrityError:
            continue
        new.add(row["event_id"])
    return new
