from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from services.analytics.adapters.schema import cited_documents, events
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.handler import Outcome, handle
from shared.errors import DependencyUnavailable
from tests.integration.analytics.pg_databases import fresh_database
from tests.unit.analytics.analytics_events import submitted
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


def test_reports_are_planned_without_jit_compilation(postgres_url: str) -> None:
    # PostgreSQL compiles a plan whose estimated cost passes jit_above_cost; the reports' joins over the
    # events table pass it from tens of thousands of questions, and the compilation then took two thirds
    # of the summary's time (measured: 2.9-3.4 s with JIT, 1.2-1.3 s without, at 60,000 questions).
    store = SqlEventStore.from_url(postgres_url)
    for _ in range(2):  # also on the pooled connection again, after the pool rolled back its transaction
        with store.engine.connect() as conn:
            assert conn.execute(text("SHOW jit")).scalar() == "off"
    store.close()


def test_a_bare_postgresql_url_uses_psycopg_3(postgres_url: str) -> None:
    store = SqlEventStore.from_url(postgres_url.replace("postgresql+psycopg://", "postgresql://"))
    assert store.ping() is True
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
    store.close()


async def test_a_read_only_database_holds_events_for_retry_instead_of_dead_lettering_them(
    postgres_server_url: str,
) -> None:
    """A hot standby or `default_transaction_read_only` refuses writes with SQLSTATE 25006, which psycopg
    raises as InternalError: the database is unavailable, not the event bad."""
    with fresh_database(postgres_server_url) as url:
        SqlEventStore.from_url(url).create_schema()
        admin = psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
        with admin:
            database = make_url(url).database
            admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = on')
            read_only = SqlEventStore.from_url(url)  # new connections pick the setting up
            try:
                with pytest.raises(DependencyUnavailable):
                    read_only.add(to_record(submitted()))
                verdict = await handle(submitted(request_id="r2").model_dump_json().encode(), store=read_only)
                assert verdict.outcome is Outcome.RETRY
            finally:
                read_only.close()
            admin.execute(f'ALTER DATABASE "{database}" SET default_transaction_read_only = off')
        writable = SqlEventStore.from_url(url)
        try:
            assert writable.add(to_record(submitted())) is True
        finally:
            writable.close()


def test_a_schema_error_is_not_taken_for_an_unavailable_database(postgres_server_url: str) -> None:
    """Only insufficient_privilege (42501) of SQLSTATE class 42 means the database refuses every event; the rest
    of the class, such as a column missing from the table (42703), stays an error of its own."""
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url)
        try:
            store.create_schema()
            with store.engine.begin() as conn:
                conn.execute(text("ALTER TABLE events DROP COLUMN model CASCADE"))  # and the views that read it
            with pytest.raises(ProgrammingError) as raised:
                store.add(to_record(submitted()))
            assert raised.value.orig.sqlstate == "42703"
            assert store.writable is True
        finally:
            store.close()
