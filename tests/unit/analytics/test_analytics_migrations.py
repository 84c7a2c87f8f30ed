"""The migrations on SQLite; tests/integration/analytics/test_analytics_migrations_pg.py runs the same on PostgreSQL."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.analytics.analytics_migration_contract import MigrationsContract

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
    assert migrate("upgrade") == "0001"
    assert migrate("downgrade", "base") == "base"
