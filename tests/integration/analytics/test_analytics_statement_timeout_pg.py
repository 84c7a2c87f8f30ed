"""ANALYTICS_STATEMENT_TIMEOUT_S on the real PostgreSQL: a report that runs too long, or waits behind a lock held
for longer than the timeout, is cancelled by the server and answered with a 503 naming the database, instead of
holding the request and its worker thread as long as it lasts; an insert cancelled the same way is retried, and
its event stored once, while /readyz says writes are refused only until an insert could take its lock again. A
statement an operator cancels with pg_cancel_backend is a 503 that says so, not that it ran too long."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text

from services.analytics.adapters import migrations
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.errors import QueryTimedOut
from services.analytics.main import WRITES_CHECK_WAIT_S, create_app
from services.analytics.reports import summary as summary_report
from services.analytics.reports.scope import Scope
from services.analytics.settings import Settings
from shared.errors import DependencyUnavailable
from tests.integration.analytics.event_stream import (
    AnalyticsProcess,
    as_message,
    delete_topology,
    publish_raw,
    stored_events,
)
from tests.integration.analytics.pg_databases import fresh_database
from tests.support import wait_until
from tests.unit.analytics.analytics_events import submitted

pytestmark = pytest.mark.integration

TIMEOUT_S = 0.5


@contextmanager
def _holding(url: str, lock: str, *, for_s: float) -> Iterator[None]:
    """Another connection holding `lock` in an open transaction until the block ends; the server ends it after
    `for_s` should the test fail first."""
    with closing(psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"))) as other:
        other.execute(f"SET idle_in_transaction_session_timeout = '{round(for_s * 1000)}ms'")
        other.execute(lock)
        yield


def test_a_report_running_past_the_statement_timeout_is_cancelled_by_the_server(postgres_server_url: str) -> None:
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url, statement_timeout_s=TIMEOUT_S)
        try:
            store.create_schema()
            started = time.monotonic()
            with pytest.raises(QueryTimedOut) as raised:
                store.read(lambda conn: conn.execute(text("SELECT pg_sleep(10)")).scalar())
            assert time.monotonic() - started < 3
            assert raised.value.code == "database_unavailable"
            assert store.read(summary_report.summary, scope=Scope()).queries == 0
        finally:
            store.close()


def test_migrations_are_not_bound_by_the_statement_timeout(postgres_server_url: str) -> None:
    """Another replica migrating holds the advisory lock past the statement timeout: this one waits for it."""
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url, timeout_s=1, statement_timeout_s=TIMEOUT_S)
        try:
            with _holding(url, f"SELECT pg_advisory_xact_lock({migrations._ADVISORY_LOCK_KEY})", for_s=2):
                store.create_schema()
            assert store.read(summary_report.summary, scope=Scope()).queries == 0
        finally:
            store.close()


@pytest.fixture
def names(amqp_url: str, unique: str) -> Iterator[dict[str, str]]:
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    yield names
    asyncio.run(delete_topology(amqp_url, **names))


def test_a_report_stuck_behind_a_lock_is_503_naming_the_database_and_the_event_held_meanwhile_is_stored_once(
    postgres_server_url: str, amqp_url: str, names: dict[str, str], tmp_path: Path,
) -> None:
    """The lock timeout (ANALYTICS_DB_TIMEOUT_S) is set far above the statement timeout, so that only the
    statement timeout can end the wait within the time asserted."""
    with fresh_database(postgres_server_url) as url:
        analytics = AnalyticsProcess(
            data_dir=tmp_path / "data", amqp_url=amqp_url, db_url=url, **names,
            env={"ANALYTICS_STATEMENT_TIMEOUT_S": str(TIMEOUT_S), "ANALYTICS_DB_TIMEOUT_S": "30"},
        )
        headers = {"X-Service-Token": analytics.token}
        event = submitted()
        try:
            analytics.start()
            with httpx.Client(base_url=analytics.url, headers=headers, timeout=20) as client:
                with _holding(url, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE", for_s=25):
                    started = time.monotonic()
                    answer = client.get("/analytics/summary")
                    assert time.monotonic() - started < 5
                    assert answer.status_code == 503, answer.text
                    assert answer.json() == {
                        "error": "database_unavailable",
                        "message": f"database cancelled the query, which may run for at most {TIMEOUT_S:g} s; "
                        "try a shorter range, or again later",
                    }
                    assert answer.headers["Retry-After"]
                    asyncio.run(publish_raw(amqp_url, **names, messages=[as_message(event)]))
                    wait_until(lambda: client.get("/readyz").json()["checks"]["database_writes"] is False,
                               timeout=10, interval=0.1, what="the consumer's insert to be cancelled")
                answer = client.get("/analytics/summary")
                assert answer.status_code == 200, answer.text
                wait_until(lambda: stored_events(url) != [], timeout=40, what="the held event to be stored")
                assert stored_events(url) == [(str(event.event_id), "QuerySubmitted")]
                assert client.get("/analytics/summary").json()["queries"] == 1
        except BaseException:
            print(analytics.log())
            raise
        finally:
            analytics.stop()


def _cancel_by_hand(url: str, statement: str) -> None:
    """pg_cancel_backend, as an operator would, of the statement of the database `url` that starts with
    `statement`, once it runs."""
    with closing(psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)) as admin:
        def cancelled() -> bool:
            return admin.execute(
                "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE %s",
                (f"{statement}%",),
            ).fetchone()[0] > 0

        wait_until(cancelled, timeout=10, interval=0.05, what=f"{statement!r} to run")


def _readiness(app) -> dict[str, bool]:
    async def ask() -> dict[str, bool]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
            return (await client.get("/readyz")).json()["checks"]

    return asyncio.run(ask())


# How an insert behind a lock is cut short: (ANALYTICS_DB_TIMEOUT_S, ANALYTICS_STATEMENT_TIMEOUT_S, by hand).
CUT_SHORT = {
    "statement timeout": (30, TIMEOUT_S, False),
    "pg_cancel_backend": (30, 30, True),
    "lock timeout": (TIMEOUT_S, 30, False),
}


@pytest.mark.parametrize("how", CUT_SHORT)
def test_readiness_takes_writes_again_as_soon_as_an_insert_cut_short_could_take_its_lock(
    postgres_server_url: str, tmp_path: Path, how: str,
) -> None:
    """/readyz said writes were refused from the insert cut short until a later write committed: a retry of the
    held events up to 30 s later, or none at all on a replica that no longer had events to store."""
    db_timeout_s, statement_timeout_s, by_hand = CUT_SHORT[how]
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url, timeout_s=db_timeout_s, statement_timeout_s=statement_timeout_s)
        app = create_app(Settings(service_token="token", data_dir=tmp_path, statement_timeout_s=statement_timeout_s))
        app.state.store = store  # no lifespan here: the store is put where it would put it
        try:
            store.create_schema()
            with _holding(url, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE", for_s=25):
                with ThreadPoolExecutor(1) as pool:
                    insert = pool.submit(store.add, to_record(submitted()))
                    if by_hand:
                        _cancel_by_hand(url, "INSERT INTO events")
                    with pytest.raises(DependencyUnavailable):
                        insert.result(timeout=10)
                assert store.writable is False
                assert _readiness(app)["database_writes"] is False  # an insert would still wait for the lock
            started = time.monotonic()
            assert _readiness(app)["database_writes"] is True
            assert time.monotonic() - started < WRITES_CHECK_WAIT_S
            assert store.writable is True  # so says the metric too
            assert stored_events(url) == []  # asking wrote nothing
        finally:
            store.close()


def test_a_report_cancelled_by_hand_is_503_saying_so_not_that_it_ran_too_long(
    postgres_server_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """pg_cancel_backend answers with the SQLSTATE of the statement timeout: the 503 said the query had run past
    ANALYTICS_STATEMENT_TIMEOUT_S, which it never had."""
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(url, statement_timeout_s=30)
        app = create_app(Settings(service_token="token", data_dir=tmp_path, statement_timeout_s=30))
        app.state.store = store

        async def summary() -> httpx.Response:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
                return await client.get("/analytics/summary", headers={"X-Service-Token": "token"})

        try:
            store.create_schema()
            with _holding(url, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE", for_s=25):
                with ThreadPoolExecutor(1) as pool:
                    answer = pool.submit(asyncio.run, summary())
                    _cancel_by_hand(url, "SELECT")
                    answer = answer.result(timeout=10)
            assert answer.status_code == 503, answer.text
            assert answer.json() == {
                "error": "database_unavailable",
                "message": "database cancelled the query before it finished; try again later",
            }
            said = next(r for r in caplog.records if r.getMessage() == "database cancelled a query")
            assert said.timed_out is False
            assert "user request" in said.error
        finally:
            store.close()
