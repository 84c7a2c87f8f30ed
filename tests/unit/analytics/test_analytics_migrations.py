"""The migrations on SQLite; tests/integration/analytics/test_analytics_migrations_pg.py runs the same on PostgreSQL."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from services.analytics.adapters import migrations
from services.analytics.adapters.sql_store import make_engine
from tests.unit.analytics.analytics_migration_contract import HEAD, MigrationsContract

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


class TestSqliteMigrations(MigrationsContract):
    @pytest.fixture
    def empty_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path}/analytics.db"


def test_ops_can_run_the_migrations_by_hand(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/by-hand.db"

    def migrate(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "services.analytics.migrate", "--url", url, *args],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    assert migrate("current") == "base"
    assert migrate("upgrade") == HEAD
    assert migrate("downgrade", "base") == "base"


def test_each_question_finds_its_rating_through_the_index_of_rated_requests(tmp_path: Path) -> None:
    # Read through the index on event_type instead, every question scanned every rating: with 10,000
    # questions and 2,000 ratings each report took minutes.
    engine = make_engine(f"sqlite:///{tmp_path}/plan.db")
    migrations.upgrade(engine)
    with engine.connect() as conn:
        plan = conn.execute(text("EXPLAIN QUERY PLAN SELECT * FROM request_outcomes")).all()
    engine.dispose()
    searches = {step.detail.split()[1]: step.detail for step in plan if step.detail.startswith("SEARCH")}
    assert "ix_events_rated_request_id (rated_request_id=? AND event_type=?)" in searches["r"], plan
    assert "ix_events_rated_request_id (rated_request_id=? AND event_type=?)" in searches["later"], plan


def test_sqlite_finds_a_requests_outcomes_by_its_request_id(tmp_path: Path) -> None:
    """Every report reads the request_outcomes view: an outcome looked up through the index on (event_type,
    occurred_at) instead read every outcome for each request, 100 s for 20,000 requests instead of 0.5."""
    engine = make_engine(f"sqlite:///{tmp_path}/plan.db")
    migrations.upgrade(engine)
    with engine.connect() as conn:
        plan = [row[-1] for row in conn.execute(text("EXPLAIN QUERY PLAN SELECT * FROM request_outcomes"))]
    engine.dispose()
    outcome_lookup = [step for step in plan if step.startswith("SEARCH o ")]
    assert outcome_lookup and all("ix_events_request_id" in step for step in outcome_lookup), plan
