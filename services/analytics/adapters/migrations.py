"""Brings the analytics schema to a revision with Alembic, safely when several replicas start at once.

Every migration runs in one transaction that only one process holds at a time: on PostgreSQL under a
transaction-scoped advisory lock, on SQLite under `BEGIN IMMEDIATE` (the database's write lock). A replica
that waited finds the schema at head and does nothing.

A database made before the migrations existed (an `events` table and no Alembic version) is adopted in
the same transaction: the old table is renamed `events_unversioned`, the schema is built, every event is
read again from the old table's payload column and deleted from it once stored again. The old table, left
with only the rows that could not be read as events, is dropped when there are none.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from pydantic import ValidationError
from sqlalchemy import JSON, Column, Connection, Engine, MetaData, Table, Uuid, inspect, select, text
from sqlalchemy.exc import OperationalError

from services.analytics.adapters.event_rows import insert_record
from services.analytics.adapters.schema import UTCDateTime
from services.analytics.domain import to_record
from shared.events import parse_event

log = logging.getLogger(__name__)

SCRIPT_LOCATION = Path(__file__).resolve().parents[1] / "migrations"
UNVERSIONED = "events_unversioned"
# Any fixed 64-bit number will do, as long as nothing else on the server locks the same one.
_ADVISORY_LOCK_KEY = 0x6361_6972_6E5F_6D67  # "cairn_mg"
_SQLITE_ATTEMPTS = 5


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for the package's migrations (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    def run(conn: Connection) -> None:
        unversioned = _holds_unversioned_events(conn)
        if unversioned:
            _move_aside(conn)
        command.upgrade(alembic_config(conn), revision)
        if unversioned:
            _read_again(conn)

    _with_lock(engine, run)


def downgrade(engine: Engine, revision: str) -> None:
    _with_lock(engine, lambda conn: command.downgrade(alembic_config(conn), revision))


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def _with_lock(engine: Engine, run: Callable[[Connection], None]) -> None:
    for attempt in range(1, _SQLITE_ATTEMPTS + 1):
        try:
            with _locked(engine) as conn:
                run(conn)
            return
        except OperationalError as exc:
            # SQLite gives up waiting for the write lock after its busy timeout; wait some more.
            if engine.dialect.name != "sqlite" or "locked" not in str(exc) or attempt == _SQLITE_ATTEMPTS:
                raise
            log.warning("database locked by another migration, retrying", extra={"attempt": attempt})
            time.sleep(0.5 * attempt)


@contextmanager
def _locked(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that one migrating process holds at a time, committed on success."""
    if engine.dialect.name == "sqlite":
        # pysqlite opens no transaction around DDL by itself: take the write lock and the transaction by hand.
        # A migration may rebuild a large table for as long as that takes: the store's statement timeout is
        # for reports and inserts (see sql_store.SqliteStatementWatchdog).
        with engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT", statement_timeout=False)
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.exec_driver_sql("ROLLBACK")
                raise
            conn.exec_driver_sql("COMMIT")
        return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            # Waits for another replica's migration, and for the reports reading the tables, however long
            # they take, and builds an index over a large table however long that takes: the store's lock
            # and statement timeouts are for reports and inserts, not for a migration.
            conn.execute(text("SET LOCAL lock_timeout = 0"))
            conn.execute(text("SET LOCAL statement_timeout = 0"))
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK_KEY})
        yield conn


def _holds_unversioned_events(conn: Connection) -> bool:
    return inspect(conn).has_table("events") and MigrationContext.configure(conn).get_current_revision() is None


def _move_aside(conn: Connection) -> None:
    log.warning("adopting an events table made before migrations", extra={"renamed_to": UNVERSIONED})
    preparer = conn.dialect.identifier_preparer
    for index in inspect(conn).get_indexes("events"):
        conn.execute(text(f"DROP INDEX {preparer.quote(index['name'])}"))
    conn.execute(text(f"ALTER TABLE events RENAME TO {UNVERSIONED}"))


def _read_again(conn: Connection, batch: int = 1000) -> None:
    old = Table(
        UNVERSIONED,
        MetaData(),
        Column("event_id", Uuid()),
        Column("received_at", UTCDateTime()),
        Column("payload", JSON()),
    )
    last, copied, unreadable = None, 0, 0
    while True:
        page = select(old.c.event_id, old.c.received_at, old.c.payload).order_by(old.c.event_id).limit(batch)
        if last is not None:
            page = page.where(old.c.event_id > last)
        rows = conn.execute(page).all()
        if not rows:
            break
        stored = []
        for event_id, received_at, payload in rows:
            try:
                event = parse_event(payload if isinstance(payload, str) else json.dumps(payload))
            except ValidationError:
                unreadable += 1
                continue
            copied += insert_record(conn, to_record(event), received_at=received_at)
            stored.append(event_id)
        if stored:  # the old table keeps only what could not be stored again
            conn.execute(old.delete().where(old.c.event_id.in_(stored)))
        last = rows[-1][0]
    if unreadable:
        log.warning("events left unread in the old table", extra={"table": UNVERSIONED, "unreadable": unreadable})
    else:
        conn.execute(text(f"DROP TABLE {UNVERSIONED}"))
    log.info("adopted the events made before migrations", extra={"events": copied})
