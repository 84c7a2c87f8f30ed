"""The reports on SQLite; tests/integration/analytics/test_analytics_reports_pg.py runs the same on PostgreSQL."""
from __future__ import annotations

from pathlib import Path

import pytest

from services.analytics.adapters.sql_store import SqlEventStore
from tests.unit.analytics.analytics_report_contract import ReportsContract

pytestmark = pytest.mark.unit


class TestSqliteReports(ReportsContract):
    @pytest.fixture
    def store(self, tmp_path: Path):
        store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/analytics.db")
        store.create_schema()
        yield store
        store.close()
