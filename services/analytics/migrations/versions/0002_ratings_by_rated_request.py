"""Ratings found by the request they rate: the index on rated_request_id also holds event_type.

The per-request view finds each question's latest rating with `rated_request_id = ? AND event_type =
'FeedbackReceived'`. With an index on rated_request_id alone, SQLite's planner took the index on
(event_type, occurred_at) instead and read every rating for every question: a few thousand ratings made
every report take minutes. An index that matches both columns is the one it picks.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""
from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_events_rated_request_id", table_name="events")
    op.create_index("ix_events_rated_request_id", "events", ["rated_request_id", "event_type"])


def downgrade() -> None:
    op.drop_index("ix_events_rated_request_id", table_name="events")
    op.create_index("ix_events_rated_request_id", "events", ["rated_request_id"])
