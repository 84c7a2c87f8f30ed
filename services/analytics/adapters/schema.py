"""The analytics tables. Created with metadata.create_all for now; Alembic migrations will own them later."""
from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Uuid,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in and out on every backend (SQLite keeps no offset: we store UTC there)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData()

events = Table(
    "events",
    metadata,
    Column("event_id", Uuid(), primary_key=True),
    Column("event_type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("occurred_at", UTCDateTime(), nullable=False, index=True),
    Column("received_at", UTCDateTime(), nullable=False),
    Column("source_service", String(64), nullable=False),
    # request_id joins a QuerySubmitted with its ResponseGenerated / QueryFailed.
    Column("request_id", String(128), index=True),
    Column("trace_id", String(64)),
    Column("user_id", String(128)),
    Column("session_id", String(128)),
    # Extracted from data at insert time so aggregates need no JSON functions.
    Column("model", String(128)),
    Column("answered", Boolean),
    Column("latency_ms", Float),
    Column("citation_count", Integer),
    Column("payload", JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    Index("ix_events_type_occurred_at", "event_type", "occurred_at"),
)
