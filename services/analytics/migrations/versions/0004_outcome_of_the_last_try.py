"""A request sent again is pending until its last try has an outcome.

The gateway frees the X-Request-ID of a question chat refused, and the client may send it again (0003). While
that last try was in flight, the view gave the request the refusal of the earlier try as its outcome: the
question counted as failed, with the earlier try's latency and a completed_at before its submitted_at. Now an
outcome that happened before the request's last QuerySubmitted belongs to an earlier try and is left out. (The
events of one try come from one chat process, its QuerySubmitted first. Sparing a request asked once from the
rule took a sub-query that PostgreSQL will not run in parallel: the view's queries took half as long again.)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""
from __future__ import annotations

import importlib

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# As in 0003, with the outcome joined only when it is of the last try (see above). The test is written as a
# CASE so that SQLite cannot answer it from the index on (event_type, occurred_at): it then chose that index over
# the one on request_id and read every outcome for each request (100 s for 20,000 requests instead of 0.5).
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
    AND CASE WHEN o.occurred_at >= q.occurred_at THEN 1 ELSE 0 END = 1
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
    previous = importlib.import_module("services.analytics.migrations.versions.0003_one_row_per_request")
    op.execute("DROP VIEW request_outcomes")
    op.execute(previous.REQUEST_OUTCOMES)
