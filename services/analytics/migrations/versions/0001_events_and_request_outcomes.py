"""Events, the documents each answer cites, and the per-request view.

Revision ID: 0001
Revises:
Create Date: 2025-03-01
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# One row per QuerySubmitted, with the first outcome of its request (a ResponseGenerated or QueryFailed with
# the same request_id) and the latest rating of it (a FeedbackReceived whose rated_request_id is that
# request_id: a request rated twice counts once, with its latest rating). Ties on occurred_at are broken by
# event_id so that every backend picks the same row.
REQUEST_OUTCOMES = """
CREATE VIEW request_outcomes AS
SELECT
    q.request_id AS request_id,
    q.occurred_at AS submitted_at,
    q.user_id AS user_id,
    q.session_id AS session_id,
    q.trace_id AS trace_id,
    COALESCE(q.conversation_id, o.conversation_id) AS conversation_id,
    q.query_text AS query,
    q.query_key AS query_key,
    COALESCE(o.model, q.model) AS model,
    COALESCE(o.outcome, 'pending') AS outcome,
    o.occurred_at AS completed_at,
    o.latency_ms AS latency_ms,
    o.confidence_level AS confidence_level,
    o.confidence_score AS confidence_score,
    o.citation_count AS citation_count,
    o.supported_citations AS supported_citations,
    o.grounding_score AS grounding_score,
    o.prompt_tokens AS prompt_tokens,
    o.completion_tokens AS completion_tokens,
    o.total_tokens AS total_tokens,
    o.failure_stage AS failure_stage,
    o.error AS failure_error,
    r.rating AS rating,
    r.comment AS comment,
    r.occurred_at AS rated_at,
    r.user_id AS rated_by,
    q.event_id AS submitted_event_id,
    o.event_id AS outcome_event_id
FROM events q
LEFT JOIN events o
    ON o.request_id = q.request_id
    AND o.event_type IN ('ResponseGenerated', 'QueryFailed')
    AND NOT EXISTS (
        SELECT 1 FROM events earlier
        WHERE earlier.request_id = o.request_id
        AND earlier.event_type IN ('ResponseGenerated', 'QueryFailed')
        AND (earlier.occurred_at < o.occurred_at
             OR (earlier.occurred_at = o.occurred_at AND earlier.event_id < o.event_id))
    )
LEFT JOIN events r
    ON r.rated_request_id = q.request_id
    AND r.event_type = 'FeedbackReceived'
    AND NOT EXISTS (
        SELECT 1 FROM events later
        WHERE later.rated_request_id = r.rated_request_id
        AND later.event_type = 'FeedbackReceived'
        AND (later.occurred_at > r.occurred_at
             OR (later.occurred_at = r.occurred_at AND later.event_id > r.event_id))
    )
WHERE q.event_type = 'QuerySubmitted'
"""


def upgrade() -> None:
    when = sa.DateTime(timezone=True)
    op.create_table(
        "events",
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("event_type", sa.String(64), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("occurred_at", when, nullable=False),
        sa.Column("received_at", when, nullable=False),
        sa.Column("source_service", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(128)),
        sa.Column("trace_id", sa.String(64)),
        sa.Column("user_id", sa.String(128)),
        sa.Column("session_id", sa.String(128)),
        sa.Column("model", sa.String(128)),
        sa.Column("outcome", sa.String(16)),
        sa.Column("answered", sa.Boolean()),
        sa.Column("no_answer", sa.Boolean()),
        sa.Column("latency_ms", sa.Float()),
        sa.Column("query_text", sa.Text()),
        sa.Column("query_key", sa.Text()),
        sa.Column("conversation_id", sa.String(128)),
        sa.Column("confidence_level", sa.String(16)),
        sa.Column("confidence_score", sa.Float()),
        sa.Column("citation_count", sa.Integer()),
        sa.Column("supported_citations", sa.Integer()),
        sa.Column("grounding_score", sa.Float()),
        sa.Column("prompt_tokens", sa.Integer()),
        sa.Column("completion_tokens", sa.Integer()),
        sa.Column("total_tokens", sa.Integer()),
        sa.Column("failure_stage", sa.String(32)),
        sa.Column("error", sa.String(128)),
        sa.Column("rated_request_id", sa.String(128)),
        sa.Column("rating", sa.Integer()),
        sa.Column("comment", sa.Text()),
        sa.Column("payload", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.PrimaryKeyConstraint("event_id", name="pk_events"),
    )
    op.create_index("ix_events_occurred_at", "events", ["occurred_at"])
    op.create_index("ix_events_type_occurred_at", "events", ["event_type", "occurred_at"])
    op.create_index("ix_events_request_id", "events", ["request_id", "event_type"])
    op.create_index("ix_events_rated_request_id", "events", ["rated_request_id"])
    op.create_table(
        "cited_documents",
        sa.Column("event_id", sa.Uuid(), nullable=False),
        sa.Column("doc_id", sa.String(512), nullable=False),
        sa.Column("request_id", sa.String(128)),
        sa.Column("occurred_at", when, nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("event_id", "doc_id", name="pk_cited_documents"),
        sa.ForeignKeyConstraint(
            ["event_id"], ["events.event_id"], name="fk_cited_documents_event", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_cited_documents_doc_id", "cited_documents", ["doc_id"])
    op.create_index("ix_cited_documents_request_id", "cited_documents", ["request_id"])
    op.execute(REQUEST_OUTCOMES)


def downgrade() -> None:
    op.execute("DROP VIEW request_outcomes")
    op.drop_table("cited_documents")
    op.drop_table("events")
