"""The migrations on PostgreSQL, each test on a database of its own."""
from __future__ import annotations

import pytest

from tests.integration.analytics.pg_databases import fresh_database
from tests.unit.analytics.analytics_migration_contract import MigrationsContract

pytestmark = pytest.mark.integration


class TestPostgresMigrations(MigrationsContract):
    @pytest.fixture
    def empty_url(self, postgres_server_url: str):
        with fresh_database(postgres_server_url) as url:
            yield url
