from __future__ import annotations

import pytest
from sqlalchemy import text

from services.analytics.adapters.schema import cited_documents, events
from services.analytics.adapters.sql_store import SqlEventStore
from tests.unit.analytics.analytics_store_contract import StoreContract

pytestmark = pytest.mark.integration


class TestPostgresStore(StoreContract):
    @pytest.fixture
    def store(self, postgres_url: str):
        store = SqlEventStore.from_url(postgres_url)
        assert store.dialect == "postgresql"
        store.create_schema()
        yield store
        # One database per session: empty the tables so each contract test starts from nothing.
        with store.engine.begin() as conn:
            conn.execute(cited_documents.delete())
            conn.execute(events.delete())
        store.close()


def test_a_bare_postgresql_url_uses_psycopg_3(postgres_url: str) -> None:
    store = SqlEventStore.from_url(postgres_url.replace("postgresql+psycopg://", "postgresql://"))
    assert store.ping() is True
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
    store.close()
