"""ANALYTICS_STATEMENT_TIMEOUT_S on SQLite, which has no statement timeout of its own: the store interrupts a
report still running at the timeout, and leaves alone one that finished and a download read slowly."""
from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.errors import QueryTimedOut
from services.analytics.main import create_app
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import summary
from services.analytics.settings import Settings
from tests.integration.analytics.synthetic_traffic import fill
from tests.unit.analytics.analytics_events import submitted

pytestmark = pytest.mark.unit

TIMEOUT_S = 0.3
# Counts to ten billion: minutes of work, far past the timeout, with no lock to wait on.
ENDLESS = text(
    "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10000000000) SELECT count(*) FROM n"
)
ROWS = text("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 2000) SELECT x FROM n")


@pytest.fixture
def store(tmp_path: Path):
    # A pool of one connection, so that each test's later reads run on the connection the timer watched.
    store = SqlEventStore.from_url(
        f"sqlite:///{tmp_path}/analytics.db", statement_timeout_s=TIMEOUT_S, pool_size=1, max_overflow=0
    )
    store.create_schema()
    yield store
    store.close()


def test_a_report_running_past_the_timeout_is_interrupted_as_a_503_naming_the_database(store: SqlEventStore) -> None:
    started = time.monotonic()
    with pytest.raises(QueryTimedOut) as raised:
        store.read(lambda conn: conn.execute(ENDLESS).scalar())
    assert time.monotonic() - started < TIMEOUT_S + 2
    assert (raised.value.status_code, raised.value.code) == (503, "database_unavailable")
    assert raised.value.message == (
        f"database cancelled the query, which may run for at most {TIMEOUT_S:g} s; try a shorter range, or again later"
    )
    assert store.add(to_record(submitted())) is True  # the connection it ran on serves on
    assert store.read(summary, scope=Scope()).queries == 1


def test_an_export_whose_first_row_takes_past_the_timeout_is_interrupted(store: SqlEventStore) -> None:
    with pytest.raises(QueryTimedOut):
        store.stream(ENDLESS)


def test_a_download_read_slowly_is_not_interrupted(store: SqlEventStore) -> None:
    rows = store.stream(ROWS, batch=10)
    time.sleep(TIMEOUT_S + 0.2)
    assert [x for (x,) in rows] == list(range(1, 2001))


def test_a_report_that_finished_in_time_leaves_no_interruption_behind(store: SqlEventStore) -> None:
    assert store.read(lambda conn: conn.execute(text("SELECT 1")).scalar()) == 1
    time.sleep(TIMEOUT_S + 0.2)  # the timer of that report would have fired by now
    assert store.add(to_record(submitted())) is True
    assert store.read(lambda conn: conn.execute(ROWS).fetchall())[-1] == (2000,)


async def test_a_real_report_over_a_large_table_past_the_timeout_answers_503_then_answers_with_a_larger_one(
    tmp_path: Path,
) -> None:
    """The first statement of the summary of 2,000 requests takes about 100 ms on a new connection here (warm,
    13 ms): far past the 6 ms it is given."""
    url = f"sqlite:///{tmp_path}/analytics.db"
    filling = SqlEventStore.from_url(url)
    filling.create_schema()
    fill(filling, 2000)
    filling.close()
    for timeout_s, status in ((0.006, 503), (30.0, 200)):
        store = SqlEventStore.from_url(url, statement_timeout_s=timeout_s)
        app = create_app(Settings(service_token="token", data_dir=tmp_path, statement_timeout_s=timeout_s))
        app.state.store = store  # no lifespan here: the store is put where it would put it
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://analytics") as client:
                answer = await client.get("/analytics/summary", headers={"X-Service-Token": "token"})
        finally:
            store.close()
        assert answer.status_code == status, answer.text
        if status == 503:
            assert answer.json()["error"] == "database_unavailable"
            assert answer.json()["message"].startswith("database cancelled the query")
        else:
            assert answer.json()["queries"] == 2000


def test_migrations_are_not_interrupted(tmp_path: Path) -> None:
    """A migration may rebuild a large table for as long as that takes: here each of its statements is given
    less than a millisecond, which the whole schema's creation takes far longer than."""
    store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/analytics.db", statement_timeout_s=0.0001)
    try:
        store.create_schema()
        with store.engine.connect() as conn:
            counting = conn.execution_options(statement_timeout=False).execute(
                text("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 200000) "
                     "SELECT count(*) FROM n")
            )
            assert counting.scalar() == 200000
    finally:
        store.close()
