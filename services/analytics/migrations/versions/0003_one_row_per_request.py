"""One row per request in the per-request view, with its latest QuerySubmitted and its latest outcome.

The gateway frees the X-Request-ID of a question chat refused (a 404 conversation_not_found, a 422
llm_content_filtered) so that the client may send it again corrected; chat has already published that try's
QuerySubmitted and QueryFailed. The view had one row per QuerySubmitted, each with the request's first
outcome: the resent question counted twice, both times failed, and its answer nowhere. Now a request is one
question, as last asked, with the outcome it last had; every event is still stored once.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28
"""
from __future__ import annotations

import importlib

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Each request_id's latest QuerySubmitted, with the latest ResponseGenerated or QueryFailed of that request_id
# and the latest FeedbackReceived whose rated_request_id is that request_id (a request rated twice counts
# once, with its latest rating). Ties on occurred_at are broken by event_id so that every backend picks the
# same row. A QuerySubmitted without a request_id is a request of its own.
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
        SELECT 1 FROM events newer
        WHERE newer.request_id = o.request_id
        AND newer.event_type IN ('ResponseGenerated', 'QueryFailed')
        AND (newer.occurred_at > o.occurred_at
             OR (newer.occurred_at = o.occurred_at AND newer.event_id > o.event_id))
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
AND NOT EXISTS (
    SELECT 1 FROM events resent
    WHERE resent.request_id = q.request_id
    AND resent.event_type = 'QuerySubmitted'
    AND (resent.occurred_at > q.occurred_at
         OR (resent.occurred_at = q.occurred_at AND resent.event_id > q.event_id))
)
"""


def upgrade() -> None:
    op.execute("DROP VIEW request_outcomes")
    op.execute(REQUEST_OUTCOMES)


def downgrade() -> None:
    first = importlib.import_module("services.analytics.migrations.versions.0001_events_and_request_outcomes")
    op.execute("DROP VIEW request_outcomes")
    op.execute(first.REQUEST_OUTCOMES)
