"""Writing one event: its row in `events` and, for an answer, its rows in `cited_documents`, on a
connection the caller holds in a transaction."""
from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime

from sqlalchemy import Connection, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from services.analytics.adapters.schema import cited_documents, events
from services.analytics.domain import EventRecord


def insert_record(conn: Connection, record: EventRecord, *, received_at: datetime | None = None) -> bool:
    """Insert the record unless its event_id is stored already; True when it was new."""
    row = asdict(record)
    cited = row.pop("cited_documents")
    row["received_at"] = received_at or datetime.now(UTC)
    if not _insert_once(conn, row):
        return False
    if cited:
        conn.execute(
            insert(cited_documents),
            [
                {"event_id": record.event_id, "doc_id": doc_id, "request_id": record.request_id,
                 "occurred_at": record.occurred_at, "count": count}
                for doc_id, count in cited
            ],
        )
    return True


def _insert_once(conn: Connection, row: dict) -> bool:
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        dialect_insert = sqlite.insert if dialect == "sqlite" else postgresql.insert
        stmt = (
            dialect_insert(events)
            .values(row)
            .on_conflict_do_nothing(index_elements=["event_id"])
            .returning(events.c.event_id)  # rowcount is -1 under psycopg 3; a returned row is certain
        )
        return conn.execute(stmt).first() is not None
    try:
        with conn.begin_nested():
            conn.execute(insert(events).values(row))
    except IntegrityError:
        return False
    return True
