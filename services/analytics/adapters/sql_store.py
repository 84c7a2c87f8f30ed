"""EventStore on SQLAlchemy (sync engine): a SQLite file by default, PostgreSQL when the URL says so.

The same store opens read connections for the reports (services/analytics/reports), so that a database
that is down is a 503 naming it wherever it is met.
"""
from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Executable, Result, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from services.analytics import metrics
from services.analytics.adapters import migrations
from services.analytics.adapters.event_rows import insert_records
from services.analytics.domain import EventRecord
from services.analytics.errors import DatabaseBusy, QueryCancelled, QueryTimedOut
from shared.errors import DependencyUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


def make_engine(
    url: str, *, timeout_s: float = 5.0, statement_timeout_s: float | None = None, pool_size: int = 5,
    max_overflow: int = 10,
) -> Engine:
    """An engine for `url`; a bare postgresql:// URL gets the installed psycopg 3 driver. A request that
    finds all pool_size + max_overflow connections in use waits `timeout_s` for one, then gets DatabaseBusy.
    A statement that runs past `statement_timeout_s` (None: never) is cancelled: by the server on PostgreSQL,
    by a SqliteStatementWatchdog on SQLite. A migration passes the execution option `statement_timeout=False`
    on SQLite, and SET LOCAL statement_timeout = 0 on PostgreSQL."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    pool = {"pool_size": pool_size, "max_overflow": max_overflow, "pool_timeout": timeout_s}
    if backend == "sqlite":
        in_memory = not parsed.database or parsed.database == ":memory:"
        if not in_memory:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            parsed, connect_args={"check_same_thread": False, "timeout": timeout_s},
            **({} if in_memory else pool),  # an in-memory database has a pool of its own kind, without these
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        if statement_timeout_s is not None:
            _time_statements(engine)  # before the watchdog starts its clock, so that this one is never behind it
            SqliteStatementWatchdog(statement_timeout_s).watch(engine)
        return engine
    if backend != "postgresql":
        return create_engine(parsed, pool_pre_ping=True, **pool)
    engine = create_engine(
        parsed, pool_pre_ping=True, connect_args={"connect_timeout": max(1, round(timeout_s))}, **pool
    )
    event.listen(engine, "connect", partial(
        _postgresql_session, lock_timeout_ms=_milliseconds(timeout_s),
        statement_timeout_ms=_milliseconds(statement_timeout_s) if statement_timeout_s is not None else 0,
    ))
    if statement_timeout_s is not None:
        _time_statements(engine)
    return engine


def _milliseconds(seconds: float) -> int:
    # Rounded up: the server's limit is never shorter than the one asked for (see _time_statements).
    return max(1, math.ceil(seconds * 1000))


def _time_statements(engine: Engine) -> None:
    """Tell a statement cancelled at the statement timeout from one cancelled by hand (pg_cancel_backend), which
    PostgreSQL reports with the same SQLSTATE: a failed statement's exception gets `statement_ran_s`, how long it
    ran as seen from here. The server counts from a little later, so a statement it cancelled at the timeout has
    always run at least that long here."""

    def started(_conn, _cursor, _statement, _parameters, context, _executemany) -> None:
        if context is not None:
            context.statement_started = time.monotonic()

    def failed(context) -> None:
        start = getattr(context.execution_context, "statement_started", None)
        if start is not None and context.sqlalchemy_exception is not None:
            context.sqlalchemy_exception.statement_ran_s = time.monotonic() - start

    event.listen(engine, "before_cursor_execute", started)
    event.listen(engine, "handle_error", failed)


def _postgresql_session(dbapi_connection, _record, *, lock_timeout_ms: int, statement_timeout_ms: int) -> None:
    # The reports' joins over the events table cost past jit_above_cost from tens of thousands of questions,
    # and compiling them took two thirds of the summary's time (2.9-3.4 s against 1.2-1.3 s at 60,000).
    # A lock held by someone else (VACUUM FULL, ALTER TABLE, LOCK TABLE, a replica migrating) made every
    # report and insert wait as long as it was held, each in a worker thread, until /readyz found none left:
    # the wait is bounded as SQLite's busy timeout bounds it, and then the database is unavailable (55P03).
    # A report that runs long without waiting on anyone (a year of a large table, a bad plan) is cancelled
    # by the server at the statement timeout (57014, 0 = never), whose thread would otherwise wait with it.
    # The export and the time series read their rows through a server-side cursor, which PostgreSQL plans
    # for its first 10 % of rows (cursor_tuple_fraction): on tables not analyzed yet that plan compared every
    # question with every other, and an export of 30,000 questions took 38 s instead of 0.3 s. Every
    # cursor here is read to its end: plan for all its rows.
    # SETs rather than startup options ("-c jit=off"), which PgBouncer refuses; committed at once, since
    # the pool's rollback would undo them.
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    cursor = dbapi_connection.cursor()
    cursor.execute("SET jit = off")
    cursor.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")
    cursor.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")
    cursor.execute("SET cursor_tuple_fraction = 1.0")
    cursor.close()
    dbapi_connection.autocommit = autocommit


class SqliteStatementWatchdog:
    """Interrupts a SQLite statement that runs past `timeout_s`, as PostgreSQL's statement_timeout cancels one:
    SQLite has no such setting. Each statement is watched from its execute until that returns, which for a
    query is when its first row is ready: aggregates and sorts are done by then, and a download read slowly
    afterwards is not a slow query. A connection with the execution option `statement_timeout=False` is not
    watched (migrations).

    One thread per engine rather than sqlite3's progress handler, which takes the GIL every N instructions of
    the query: beside a busy thread a 1.6 s query took 4.6 s with a call every 100,000 instructions. No statement
    wakes the thread (that would be a thread switch per statement): it sleeps until the earliest deadline, or for
    `timeout_s` when none is set, which no deadline of a statement started meanwhile can precede. Watching costs
    a statement a few microseconds of SQLAlchemy's event dispatch. interrupt() runs under the lock, so never on a
    statement that has been removed as ended (on a connection that runs none, it does nothing)."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        # id of a sqlite3 connection: (deadline, the connection). Keyed by connection, which runs one statement at
        # a time, so that the next statement on it replaces an entry that an execute left behind.
        self._running: dict[int, tuple[float, Any]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, engine: Engine) -> None:
        event.listen(engine, "before_cursor_execute", self._started)
        event.listen(engine, "after_cursor_execute", self._ended)
        event.listen(engine, "handle_error", self._failed)

    def _started(self, conn: Connection, cursor, _statement, _parameters, _context, _executemany) -> None:
        if conn.get_execution_options().get("statement_timeout", True) is False:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._interrupt_late, name="sqlite-statement-timeout",
                                                daemon=True)
                self._thread.start()
            self._running[id(cursor.connection)] = (time.monotonic() + self._timeout_s, cursor.connection)

    def _ended(self, _conn, cursor, _statement, _parameters, _context, _executemany) -> None:
        with self._lock:
            self._running.pop(id(cursor.connection), None)

    def _failed(self, context) -> None:
        if (cursor := getattr(context.execution_context, "cursor", None)) is not None:
            self._ended(None, cursor, None, None, None, None)

    def _interrupt_late(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                for key, (deadline, dbapi_connection) in list(self._running.items()):
                    if deadline <= now:
                        del self._running[key]
                        with suppress(sqlite3.Error):  # closed meanwhile: nothing left to interrupt
                            dbapi_connection.interrupt()
                earliest = min((deadline for deadline, _ in self._running.values()), default=now + self._timeout_s)
            time.sleep(earliest - now)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL lets the API read while the consumer writes.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


class SqlEventStore:
    def __init__(self, engine: Engine, *, statement_timeout_s: float | None = None) -> None:
        """`statement_timeout_s`: the one `engine` was made with, for the message of a cancelled query."""
        self._engine = engine
        self._statement_timeout_s = statement_timeout_s
        self._schema_ready = False
        self._write_refusal: str | None = None  # why the last write failed, until one commits
        # The last write failed only cut short (cancelled, or gave up waiting for a lock), not refused outright.
        self._write_cut_short = False
        self._write_failures = 0  # counted, so that a check does not clear a failure that came while it ran
        self._write_state = threading.Lock()  # the consumer's worker thread and /readyz's both change it
        self._checking_writes = threading.Lock()
        self._pinging = threading.Lock()
        metrics.DATABASE_WRITABLE.set(1)

    @classmethod
    def from_url(
        cls, url: str, *, timeout_s: float = 5.0, statement_timeout_s: float | None = None, pool_size: int = 5,
        max_overflow: int = 10,
    ) -> SqlEventStore:
        engine = make_engine(
            url, timeout_s=timeout_s, statement_timeout_s=statement_timeout_s, pool_size=pool_size,
            max_overflow=max_overflow,
        )
        return cls(engine, statement_timeout_s=statement_timeout_s)

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    @property
    def writable(self) -> bool:
        """False from a write the database refused (down, read-only, out of disk, ...) until one commits, or until
        `takes_writes` finds that one cut short could go through now: a database can answer SELECT 1 and still
        refuse every insert."""
        return self._write_refusal is None

    def takes_writes(self, *, timeout_s: float) -> bool:
        """For /readyz: whether the database takes writes now, asking it within `timeout_s` where `writable`
        cannot tell. A refused write (read-only, out of disk, INSERT revoked, down) is only known to be over when
        a write commits. A write only cut short (cancelled by the statement timeout or by hand, or given up
        waiting for a lock) says nothing lasting, so the database is asked whether an insert could take its
        lock now; when it can, the database takes writes again. False at once while an earlier check has not
        returned (a frozen database), so that readiness never waits on more than one."""
        if self._write_refusal is None:
            return True
        if not self._write_cut_short or not self._checking_writes.acquire(blocking=False):
            return False
        try:
            failures = self._write_failures
            if not self._insert_lock_free(timeout_s):
                return False
            self._writes_taken(unless_failed_since=failures)
            return self._write_refusal is None
        finally:
            self._checking_writes.release()

    def _insert_lock_free(self, timeout_s: float) -> bool:
        """Whether an insert could take its lock within `timeout_s`; rolled back, so nothing is written."""
        try:
            with self._engine.connect() as conn:
                if self.dialect == "postgresql":
                    conn.execute(text(f"SET LOCAL lock_timeout = {_milliseconds(timeout_s)}"))
                    conn.execute(text(f"SET LOCAL statement_timeout = {_milliseconds(timeout_s)}"))
                    conn.execute(text("LOCK TABLE events IN ROW EXCLUSIVE MODE"))
                    return True
                if self.dialect == "sqlite":
                    busy_timeout_ms = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
                    conn.exec_driver_sql(f"PRAGMA busy_timeout = {_milliseconds(timeout_s)}")
                    try:
                        conn.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock an insert takes
                        conn.rollback()
                    finally:
                        conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
                    return True
                conn.execute(text("SELECT 1"))
                return True
        except SQLAlchemyError:
            return False

    def create_schema(self, *, quiet: bool = False) -> None:
        """Upgrade the schema to the latest migration (see adapters/migrations.py)."""
        with self._unavailable_as_503(quiet=quiet):
            migrations.upgrade(self._engine)
        self._schema_ready = True

    def add(self, record: EventRecord) -> bool:
        return self.add_many([record])[0]

    def add_many(self, records: Sequence[EventRecord]) -> list[bool]:
        if not records:
            return []
        try:
            self._ensure_schema(quiet=True)
            with self._unavailable_as_503(quiet=True), self._engine.begin() as conn:
                new = insert_records(conn, records)
        except DatabaseBusy:  # up, and taking writes: the reports hold every connection for now
            raise
        except DependencyUnavailable as exc:
            self._writes_refused(exc, cut_short=_cut_short(exc.__cause__))
            raise
        self._writes_taken()
        return new

    def read(self, report: Callable[..., T], /, **arguments: Any) -> T:
        """report(conn, **arguments) on a read connection."""
        self._ensure_schema()
        with self._unavailable_as_503(), self._engine.connect() as conn:
            return report(conn, **arguments)

    def stream(self, statement: Executable, *, batch: int = 500) -> StreamedRows:
        """The rows of `statement`, fetched `batch` at a time; the connection goes back when they have all been
        read or are closed. The query runs before this returns, so a database that is down raises here rather
        than in the middle of a response."""
        self._ensure_schema()
        with self._unavailable_as_503():
            conn = self._engine.connect()
            try:
                result = conn.execution_options(stream_results=True, yield_per=batch).execute(statement)
            except BaseException:
                conn.close()
                raise
        return StreamedRows(conn, result)

    def ping(self) -> bool:
        """For /readyz: whether the database answers SELECT 1. False at once while an earlier ping has not
        returned: a frozen database (stopped, or its network silently gone) holds a query without an error, and
        probes sent every few seconds would otherwise each hold a thread and, in the end, every connection."""
        if not self._pinging.acquire(blocking=False):
            return False
        try:
            with self._engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except SQLAlchemyError:
            return False
        finally:
            self._pinging.release()

    def close(self) -> None:
        self._engine.dispose()

    def _ensure_schema(self, *, quiet: bool = False) -> None:
        # The database may have been down at start-up; migrate on first use instead.
        if not self._schema_ready:
            self.create_schema(quiet=quiet)

    def _writes_refused(self, exc: DependencyUnavailable, *, cut_short: bool) -> None:
        # Said once per cause, not at each retry of the held events: the consumer retries for as long as it lasts.
        reason = _error_text(exc.__cause__ or exc)
        with self._write_state:
            if reason != self._write_refusal:
                log.error("database refuses writes, events stay in the queue until it takes them",
                          extra={"error": reason})
            self._write_failures += 1
            self._write_refusal, self._write_cut_short = reason, cut_short
            metrics.DATABASE_WRITABLE.set(0)

    def _writes_taken(self, *, unless_failed_since: int | None = None) -> None:
        """`unless_failed_since`: the count of failed writes when a check began; a write that failed since wins."""
        with self._write_state:
            if unless_failed_since is not None and unless_failed_since != self._write_failures:
                return
            if self._write_refusal is not None:
                log.warning("database takes writes again")
            self._write_refusal = None
            metrics.DATABASE_WRITABLE.set(1)

    @contextmanager
    def _unavailable_as_503(self, *, quiet: bool = False) -> Iterator[None]:
        """`quiet` leaves saying why to the caller (add_many says it once per cause)."""
        try:
            yield
        except PoolTimeout as exc:
            log.warning("no database connection came free", extra={"pool": self._engine.pool.status()})
            raise DatabaseBusy() from exc
        except DBAPIError as exc:
            if _cancelled(exc):
                timed_out = self._ran_past_statement_timeout(exc)
                if not quiet:
                    log.warning("database cancelled a query", extra={
                        "error": _error_text(exc), "statement_timeout_s": self._statement_timeout_s,
                        "timed_out": timed_out,
                    })
                if timed_out:
                    raise QueryTimedOut(timeout_s=self._statement_timeout_s) from exc
                raise QueryCancelled() from exc
            if _database_unavailable(exc):
                if not quiet:
                    log.warning("database error", extra={"error": _error_text(exc)})
                raise DependencyUnavailable("database") from exc
            raise

    def _ran_past_statement_timeout(self, exc: DBAPIError) -> bool:
        """Whether a cancelled statement ran as long as the statement timeout, which then cancelled it; shorter,
        someone cancelled it by hand (pg_cancel_backend), and saying it ran too long would mislead."""
        ran_s = getattr(exc, "statement_ran_s", None)
        return self._statement_timeout_s is not None and ran_s is not None and ran_s >= self._statement_timeout_s


class StreamedRows:
    """The rows of a query read as they are iterated, on a connection held until they are all read or
    close() is called (which a reader that stops early must do)."""

    def __init__(self, conn: Connection, result: Result) -> None:
        self._conn, self._result = conn, result

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self._result
        finally:
            self.close()

    def close(self) -> None:
        try:
            self._result.close()
        finally:
            self._conn.close()


# SQLSTATE classes that say the database cannot take writes now, whatever the event: connection (08),
# read-only or otherwise invalid transaction state (25: a hot standby, default_transaction_read_only),
# serialization failures and deadlocks (40), out of disk or memory (53), locks not available (55),
# shutdown or operator intervention (57), system errors (58). psycopg raises some of these as
# InternalError or NotSupportedError, not OperationalError: held and retried, not dead-lettered.
_UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "25", "40", "53", "55", "57", "58"})
# And from class 42 only insufficient_privilege (INSERT revoked from analytics' role): an administrator's
# mistake refuses every event alike, while the rest of class 42 (a missing column, ...) is a real schema error.
_UNAVAILABLE_SQLSTATES = frozenset({"42501"})


def _error_text(exc: BaseException) -> str:
    return str(getattr(exc, "orig", None) or exc)[:300]


def _cancelled(exc: DBAPIError) -> bool:
    """A statement the database cancelled: PostgreSQL's query_canceled (the statement timeout, or by hand), or
    SQLite's interrupted (by SqliteStatementWatchdog)."""
    if getattr(exc.orig, "sqlstate", None) == "57014":
        return True
    return getattr(exc.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT


def _cut_short(exc: BaseException | None) -> bool:
    """A statement cancelled, or that gave up waiting for a lock (PostgreSQL's lock_not_available, SQLite's busy),
    rather than refused by the database."""
    if not isinstance(exc, DBAPIError):
        return False
    if _cancelled(exc) or getattr(exc.orig, "sqlstate", None) == "55P03":
        return True
    return getattr(exc.orig, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY


def _database_unavailable(exc: DBAPIError) -> bool:
    if isinstance(exc, OperationalError) or exc.connection_invalidated:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if not isinstance(sqlstate, str):
        return False
    return sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES or sqlstate in _UNAVAILABLE_SQLSTATES
