"""The analytics tables and the per-request view, as SQLAlchemy Core objects for the queries.

The migrations in services/analytics/migrations own the schema; these definitions must describe the same
tables (a test compares them with what the migrations build).
"""
from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
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
    Column("event_id", Uuid(), nullable=False),
    Column("event_type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("occurred_at", UTCDateTime(), nullable=False),
    Column("received_at", UTCDateTime(), nullable=False),
    Column("source_service", String(64), nullable=False),
    # request_id joins a QuerySubmitted with its ResponseGenerated / QueryFailed.
    Column("request_id", String(128)),
    Column("trace_id", String(64)),
    Column("user_id", String(128)),
    Column("session_id", String(128)),
    # Extracted from data at insert time (domain.to_record) so the reports need no JSON functions.
    Column("model", String(128)),
    Column("outcome", String(16)),
    Column("answered", Boolean),
    Column("no_answer", Boolean),
    Column("latency_ms", Float),
    Column("query_text", Text),
    Column("query_key", Text),
    Column("conversation_id", String(128)),
    Column("confidence_level", String(16)),
    Column("confidence_score", Float),
    Column("citation_count", Integer),
    Column("supported_citations", Integer),
    Column("grounding_score", Float),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("total_tokens", Integer),
    Column("failure_stage", String(32)),
    Column("error", String(128)),
    Column("rated_request_id", String(128)),
    Column("rating", Integer),
    Column("comment", Text),
    Column("payload", JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    PrimaryKeyConstraint("event_id", name="pk_events"),
    Index("ix_events_occurred_at", "occurred_at"),
    Index("ix_events_type_occurred_at", "event_type", "occurred_at"),
    Index("ix_events_request_id", "request_id", "event_type"),
    Index("ix_events_rated_request_id", "rated_request_id", "event_type"),
)

cited_documents = Table(
    "cited_documents",
    metadata,
    Column("event_id", Uuid(), ForeignKey("events.event_id", name="fk_cited_documents_event", ondelete="CASCADE"),
           nullable=False),
    Column("doc_id", String(512), nullable=False),
    Column("request_id", String(128)),
    Column("occurred_at", UTCDateTime(), nullable=False),
    Column("count", Integer, nullable=False),
    PrimaryKeyConstraint("event_id", "doc_id", name="pk_cited_documents"),
    Index("ix_cited_documents_doc_id", "doc_id"),
    Index("ix_cited_documents_request_id", "request_id"),
)

# The view is created by the migrations; this describes its columns for the queries (it is kept out of
# `metadata`, so nothing ever tries to create it as a table).
views = MetaData()

request_outcomes = Table(
    "request_outcomes",
    views,
    Column("request_id", String(128)),
    Column("submitted_at", UTCDateTime()),
    Column("user_id", String(128)),
    Column("session_id", String(128)),
    Column("trace_id", String(64)),
    Column("conversation_id", String(128)),
    Column("query", Text),
    Column("query_key", Text),
    Column("model", String(128)),
    Column("outcome", String(16)),
    Column("completed_at", UTCDateTime()),
    Column("latency_ms", Float),
    Column("confidence_level", String(16)),
    Column("confidence_score", Float),
    Column("citation_count", Integer),
    Column("supported_citations", Integer),
    Column("grounding_score", Float),
    Column("prompt_tokens", Integer),
    Column("completion_tokens", Integer),
    Column("total_tokens", Integer),
    Column("failure_stage", String(32)),
    Column("failure_error", String(128)),
    Column("rating", Integer),
    Column("comment", Text),
    Column("rated_at", UTCDateTime()),
    Column("rated_by", String(128)),
    Column("submitted_event_id", Uuid()),
    Column("outcome_event_id", Uuid()),
)
