"""ANALYTICS_STATEMENT_TIMEOUT_S on the real PostgreSQL: a report that runs too long, or waits behind a lock held
for longer than the timeout, is cancelled by the server and answered with a 503 naming the database, instead of
holding the request and its worker thread as long as it lasts; an insert cancelled the same way is retried, and
its event stored once."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import httpx
import psycopg
import pytest
from sqlalchemy import text

from services.analytics.adapters import migrations
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.errors import QueryTimedOut
from services.analytics.reports import summary as summary_report
from services.analytics.reports.scope import Scope
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
