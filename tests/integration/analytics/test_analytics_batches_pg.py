"""What the SQL store writes for a batch of events, on PostgreSQL, each test on a database of its own (the
same tests run on SQLite in tests/unit/analytics/test_analytics_store.py)."""
from __future__ import annotations

import pytest

from tests.integration.analytics.pg_databases import fresh_store
from tests.unit.analytics.analytics_store_contract import SqlStoreContract

pytestmark = pytest.mark.integration


class TestPostgresBatches(SqlStoreContract):
    @pytest.fixture
    def store(self, postgres_server_url: str):
        with fresh_store(postgres_server_url) as store:
            yield store
