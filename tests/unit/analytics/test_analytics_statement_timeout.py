"""ANALYTICS_STATEMENT_TIMEOUT_S on SQLite, which has no statement timeout of its own: the store interrupts a
report still running at the timeout, and leaves alone one that finished and a download read slowly; an insert
interrupted so makes /readyz say writes are not taken only until the database would take one again."""
from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import event, text

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.errors import QueryTimedOut
from services.analytics.main import WRITES_CHECK_TIMEOUT_S, WRITES_CHECK_WAIT_S, create_app
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import summary
from services.analytics.settings import Settings
from shared.errors import DependencyUnavailable
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



async def _readiness(app) -> dict[str, bool]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        return (await client.get("/readyz")).json()["checks"]


@pytest.fixture
def ready_app(tmp_path: Path):
    """The app over a store whose lock waits end after 0.5 s (ANALYTICS_DB_TIMEOUT_S), no lifespan: the store is
    put where the lifespan would put it."""
    store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/analytics.db", timeout_s=0.5, statement_timeout_s=TIMEOUT_S)
    store.create_schema()
    app = create_app(Settings(service_token="token", data_dir=tmp_path, statement_timeout_s=TIMEOUT_S))
    app.state.store = store
    yield app
    store.close()


def _cut_short_by_a_lock(store: SqlEventStore, path: Path) -> sqlite3.Connection:
    """An insert that waited for the write lock another writer (a sqlite3 shell, a long migration) holds, until
    it gave up; returns that writer, still holding the lock."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(DependencyUnavailable):
        store.add(to_record(submitted()))
    return other


async def test_readiness_takes_writes_again_as_soon_as_the_lock_that_cut_an_insert_short_is_gone(
    tmp_path: Path, ready_app,
) -> None:
    """/readyz said writes were refused until a later write committed: a retry of the held events up to 30 s
    later, or none at all on a replica that no longer had events to store."""
    store: SqlEventStore = ready_app.state.store
    other = _cut_short_by_a_lock(store, tmp_path / "analytics.db")
    try:
        assert (await _readiness(ready_app))["database_writes"] is False  # an insert would still wait
    finally:
        other.close()  # ends its transaction
    started = time.monotonic()
    assert (await _readiness(ready_app))["database_writes"] is True
    assert time.monotonic() - started < WRITES_CHECK_TIMEOUT_S
    assert store.writable is True  # so says the metric too
    assert store.read(summary, scope=Scope()).queries == 0  # asking wrote nothing


async def test_readiness_takes_writes_again_at_once_after_an_insert_past_the_statement_timeout(
    tmp_path: Path, ready_app,
) -> None:
    store: SqlEventStore = ready_app.state.store
    with store.engine.begin() as conn:  # each insert first counts a billion rows
        conn.execute(text("CREATE TABLE thousand (x INTEGER)"))
        conn.execute(text("INSERT INTO thousand VALUES " + ", ".join(["(1)"] * 1000)))
        conn.execute(text("CREATE TRIGGER slow BEFORE INSERT ON events BEGIN "
                          "SELECT count(*) FROM thousand a, thousand b, thousand c; END"))
    with pytest.raises(QueryTimedOut):
        store.add(to_record(submitted()))
    assert store.writable is False
    assert (await _readiness(ready_app))["database_writes"] is True


async def test_readiness_still_refuses_writes_after_a_write_the_database_refused(tmp_path: Path, ready_app) -> None:
    """A read-only or full database answers every question, and gives its write lock, but refuses every insert:
    only a write that commits tells that it is over."""
    store: SqlEventStore = ready_app.state.store
    store.engine.dispose()
    event.listen(store.engine, "connect", lambda connection, _: connection.execute("PRAGMA query_only = ON"))
    with pytest.raises(DependencyUnavailable):
        store.add(to_record(submitted()))
    assert (await _readiness(ready_app))["database_writes"] is False
    assert store.writable is False


async def test_readiness_never_waits_on_a_database_that_does_not_answer_whether_it_takes_writes(
    tmp_path: Path, ready_app, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frozen database answers nothing: /readyz answers within WRITES_CHECK_WAIT_S, and while that check has
    not returned, the next /readyz answers at once without asking again (no worker thread is spent per request)."""
    store: SqlEventStore = ready_app.state.store
    _cut_short_by_a_lock(store, tmp_path / "analytics.db").close()
    frozen, asked = threading.Event(), []

    def never_answers(timeout_s: float) -> bool:
        asked.append(timeout_s)
        frozen.wait(20)
        return True

    monkeypatch.setattr(store, "_insert_lock_free", never_answers)
    try:
        for _ in range(3):
            started = time.monotonic()
            assert (await _readiness(ready_app))["database_writes"] is False
            assert time.monotonic() - started < WRITES_CHECK_WAIT_S + 0.5
        assert asked == [WRITES_CHECK_TIMEOUT_S]
    finally:
        frozen.set()
    time.sleep(0.1)  # the check left running returns
    assert (await _readiness(ready_app))["database_writes"] is True
