from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ProgrammingError

from services.analytics.adapters import migrations
from services.analytics.adapters.schema import cited_documents, events
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.handler import Outcome, handle
from services.analytics.reports import summary as summary_report
from services.analytics.reports.scope import Scope
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


@contextmanager
def _holding(url: str, lock: str, *, for_s: float) -> Iterator[None]:
    """Someone else (a VACUUM FULL, an ALTER TABLE, a migrating replica) holding `lock` in an open transaction;
    the server ends it after `for_s`, so that a store waiting on it cannot wait forever."""
    with closing(psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))) as other:
        other.execute(f"SET idle_in_transaction_session_timeout = '{round(for_s * 1000)}ms'")
        other.execute(lock)
        yield


def test_a_table_locked_by_someone_else_is_503_within_the_timeout_not_a_hang(postgres_server_url: str) -> None:
    """Without a lock timeout every report and insert waited for the lock as long as it was held, each with a
    worker thread, until /readyz itself found none left; ANALYTICS_DB_TIMEOUT_S bounds a lock wait, as on SQLite."""
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url, timeout_s=1)
        try:
            store.create_schema()
            with _holding(url, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE", for_s=8):
                started = time.monotonic()
                with pytest.raises(DependencyUnavailable):
                    store.read(summary_report.summary, scope=Scope())
                with pytest.raises(DependencyUnavailable):
                    store.add(to_record(submitted()))
                assert time.monotonic() - started < 6
                assert store.writable is False
            assert store.add(to_record(submitted())) is True
        finally:
            store.close()


def test_a_migration_waits_for_another_replica_migrating_longer_than_the_timeout(postgres_server_url: str) -> None:
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url, timeout_s=1)
        try:
            with _holding(url, f"SELECT pg_advisory_xact_lock({migrations._ADVISORY_LOCK_KEY})", for_s=2.5):
                store.create_schema()  # waits for the lock, past the 1 s lock timeout of other statements
            assert store.add(to_record(submitted())) is True
        finally:
            store.close()


def test_cursors_are_planned_for_all_their_rows(postgres_url: str) -> None:
    # The export and the time series read through a server-side cursor, which PostgreSQL plans for its first
    # 10 % of rows; on tables autovacuum had not analyzed yet (a new or just adopted database) that plan compared
    # every question with every other (measured: 10,000 questions exported in 5-7.5 s, the time series 5 s,
    # where reading the export's rows whole took 0.15-0.3 s; 30,000 in 38 s).
    store = SqlEventStore.from_url(postgres_url)
    for _ in range(2):  # also on the pooled connection again, after the pool rolled back its transaction
        with store.engine.connect() as conn:
            assert float(conn.execute(text("SHOW cursor_tuple_fraction")).scalar()) == 1.0
    store.close()
