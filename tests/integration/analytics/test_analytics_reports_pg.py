"""The reports on PostgreSQL, each test on a database of its own: the same figures as on SQLite."""
from __future__ import annotations

import pytest

from tests.integration.analytics.pg_databases import fresh_store
from tests.unit.analytics.analytics_report_contract import ReportsContract

pytestmark = pytest.mark.integration


class TestPostgresReports(ReportsContract):
    @pytest.fixture
    def store(self, postgres_server_url: str):
        with fresh_store(postgres_server_url) as store:
            yield store


class TestPostgresReportsInALanguagesCollation(ReportsContract):
    """A database ordering text as a language does (the default of many installations): the same figures,
    ties in the same order."""

    @pytest.fixture
    def store(self, postgres_server_url: str):
        with fresh_store(postgres_server_url, icu_locale="en-US") as store:
            yield store
