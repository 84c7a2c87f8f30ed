"""EventStore on SQLAlchemy (sync engine): a SQLite file by default, PostgreSQL when the URL says so."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, case, create_engine, event, func, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError, SQLAlchemyError

from services.analytics.adapters.schema import events, metadata
from services.analytics.domain import EventRecord, Summary
from shared.errors import DependencyUnavailable

log = logging.getLogger(__name__)


def make_engine(url: str, *, timeout_s: float = 5.0) -> Engine:
    """An engine for `url`; a bare postgresql:// URL gets the installed psycopg 3 driver."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(parsed, connect_args={"check_same_thread": False, "timeout": timeout_s})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    connect_args = {"connect_timeout": max(1, round(timeout_s))} if backend == "postgresql" else {}
    return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL lets the API read while the consumer writes.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


class SqlEventStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._schema_ready = False

    @classmethod
    def from_url(cls, url: str, *, timeout_s: float = 5.0) -> SqlEventStore:
        return cls(make_engine(url, timeout_s=timeout_s))

    @property
    def dialect(self) -> str:
        return self._engine.dialect.name

    def create_schema(self) -> None:
        with self._unavailable_as_503():
            try:
                metadata.create_all(self._engine)
            except (IntegrityError, ProgrammingError):
                # Another replica created the tables between our check and our CREATE: look again.
                metadata.create_all(self._engine)
        self._schema_ready = True

    def add(self, record: EventRecord) -> bool:
        self._ensure_schema()
        row = asdict(record) | {"received_at": datetime.now(UTC)}
        with self._unavailable_as_503(), self._engine.begin() as conn:
            if self.dialect in ("sqlite", "postgresql"):
                dialect_insert = sqlite.insert if self.dialect == "sqlite" else postgresql.insert
                stmt = (
                    dialect_insert(events)
                    .values(row)
                    .on_conflict_do_nothing(index_elements=["event_id"])
                    .returning(events.c.event_id)  # rowcount is -1 under psycopg 3; a returned row is certain
                )
                return conn.execute(stmt).first() is not None
            try:
                with conn.begin_nested():
                    conn.execute(insert(events).values(row))
            except IntegrityError:
                return False
            return True

    def summary(self, *, start: datetime | None = None, end: datetime | None = None) -> Summary:
        self._ensure_schema()
        response = events.c.event_type == "ResponseGenerated"
        stmt = select(
            func.count(case((events.c.event_type == "QuerySubmitted", 1))),
            func.count(case((response & events.c.answered.is_(True), 1))),
            func.count(case((response & events.c.answered.is_(False), 1))),
            func.count(case((events.c.event_type == "QueryFailed", 1))),
            func.avg(case((response, events.c.latency_ms))),
            func.avg(case((response, events.c.citation_count))),
        )
        if start is not None:
            stmt = stmt.where(events.c.occurred_at >= start)
        if end is not None:
            stmt = stmt.where(events.c.occurred_at < end)
        with self._unavailable_as_503(), self._engine.connect() as conn:
            queries, answered, unanswered, failed, latency, citations = conn.execute(stmt).one()
        return Summary(
            queries=queries,
            answered=answered,
            unanswered=unanswered,
            failed=failed,
            mean_latency_ms=None if latency is None else float(latency),
            mean_citations=None if citations is None else float(citations),
        )

    def ping(self) -> bool:
        try:
            with self._engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except SQLAlchemyError:
            return False

    def close(self) -> None:
        self._engine.dispose()

    def _ensure_schema(self) -> None:
        # The database may have been down at start-up; create the tables on first use instead.
        if not self._schema_ready:
            self.create_schema()

    @contextmanager
    def _unavailable_as_503(self) -> Iterator[None]:
        try:
            yield
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, OperationalError) or exc.connection_invalidated:
                log.warning("database error", extra={"error": str(exc.orig or exc)[:300]})
                raise DependencyUnavailable("database") from exc
            raise
