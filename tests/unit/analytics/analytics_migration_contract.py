"""The Alembic migrations on a backend. Subclass with an `empty_url` fixture: the URL of an empty database."""
from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (
    JSON, Boolean, Column, DateTime, Float, Index, Integer, MetaData, String, Table, Uuid, inspect, select,
)
from sqlalchemy.dialects.postgresql import JSONB

from services.analytics.adapters import migrations
from services.analytics.adapters.schema import metadata
from services.analytics.adapters.sql_store import SqlEventStore, make_engine
from services.analytics.domain import to_record
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import summary
from tests.unit.analytics.analytics_events import feedback, responded, submitted

TABLES = {"alembic_version", "cited_documents", "events"}
HEAD = "0004"

# The events table as Cairn created it with metadata.create_all before there were migrations.
_before_migrations = MetaData()
_unversioned_events = Table(
    "events",
    _before_migrations,
    Column("event_id", Uuid(), primary_key=True),
    Column("event_type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False, index=True),
    Column("received_at", DateTime(timezone=True), nullable=False),
    Column("source_service", String(64), nullable=False),
    Column("request_id", String(128), index=True),
    Column("trace_id", String(64)),
    Column("user_id", String(128)),
    Column("session_id", String(128)),
    Column("model", String(128)),
    Column("answered", Boolean),
    Column("latency_ms", Float),
    Column("citation_count", Integer),
    Column("payload", JSON().with_variant(JSONB(), "postgresql"), nullable=False),
    Index("ix_events_type_occurred_at", "event_type", "occurred_at"),
)


def _old_row(event) -> dict:
    return {
        "event_id": event.event_id, "event_type": event.event_type, "schema_version": 1,
        "occurred_at": event.occurred_at, "received_at": datetime.now(UTC), "source_service": "chat",
        "request_id": event.request_id, "payload": event.model_dump(mode="json"),
    }


class MigrationsContract:
    @pytest.fixture
    def empty_url(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def engine(self, empty_url: str):
        engine = make_engine(empty_url)
        yield engine
        engine.dispose()

    def test_upgrade_from_empty_builds_tables_and_view(self, engine) -> None:
        assert migrations.current_revision(engine) is None
        migrations.upgrade(engine)
        assert migrations.current_revision(engine) == HEAD
        inspector = inspect(engine)
        assert set(inspector.get_table_names()) == TABLES
        assert inspector.get_view_names() == ["request_outcomes"]

    def test_the_migrated_schema_is_the_one_the_queries_describe(self, engine) -> None:
        migrations.upgrade(engine)
        with engine.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), metadata)
        assert differences == []

    def test_downgrade_and_upgrade_again(self, engine) -> None:
        migrations.upgrade(engine)
        migrations.downgrade(engine, "base")
        assert migrations.current_revision(engine) is None
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        assert inspect(engine).get_view_names() == []
        migrations.upgrade(engine)
        store = SqlEventStore(engine)
        assert store.add(to_record(submitted(request_id="again"))) is True
        assert store.read(summary, scope=Scope()).queries == 1

    def test_a_database_at_the_first_revision_keeps_its_events_through_the_upgrade(self, engine) -> None:
        migrations.upgrade(engine, "0001")
        store = SqlEventStore(engine)
        store.add_many([to_record(submitted(request_id="kept")), to_record(feedback(rated_request_id="kept", rating=-1))])
        migrations.upgrade(engine)
        assert migrations.current_revision(engine) == HEAD
        body = store.read(summary, scope=Scope())
        assert (body.queries, body.feedback.ratings, body.feedback.negative) == (1, 1, 1)
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []

    def test_upgrading_twice_changes_nothing(self, engine) -> None:
        migrations.upgrade(engine)
        store = SqlEventStore(engine)
        store.add(to_record(submitted()))
        migrations.upgrade(engine)
        assert store.read(summary, scope=Scope()).queries == 1

    @pytest.mark.parametrize("round_", range(3))
    def test_replicas_upgrading_at_once_all_succeed(self, empty_url: str, round_: int) -> None:
        engines = [make_engine(empty_url) for _ in range(4)]
        start, errors = threading.Barrier(len(engines)), []

        def replica(engine) -> None:
            start.wait()
            try:
                migrations.upgrade(engine)
            except Exception as exc:  # collected: the assertion below names them
                errors.append(exc)

        threads = [threading.Thread(target=replica, args=(engine,)) for engine in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        try:
            assert errors == []
            assert migrations.current_revision(engines[0]) == HEAD
            assert set(inspect(engines[0]).get_table_names()) == TABLES
        finally:
            for engine in engines:
                engine.dispose()

    def test_an_events_table_from_before_migrations_is_adopted(self, engine) -> None:
        question, answer = submitted(request_id="old"), responded(request_id="old", total_ms=80.0, citations=1)
        _before_migrations.create_all(engine)
        with engine.begin() as conn:
            conn.execute(_unversioned_events.insert(), [_old_row(question), _old_row(answer)])
        migrations.upgrade(engine)
        assert migrations.current_revision(engine) == HEAD
        assert set(inspect(engine).get_table_names()) == TABLES  # the old table is gone
        body = SqlEventStore(engine).read(summary, scope=Scope())
        assert (body.queries, body.answered, body.mean_latency_ms, body.mean_citations) == (1, 1, 80.0, 1.0)
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []

    def test_old_events_that_cannot_be_read_are_kept_aside(self, engine) -> None:
        good = submitted(request_id="good")
        broken = _old_row(submitted(request_id="broken")) | {"payload": {"event_type": "QuerySubmitted"}}
        _before_migrations.create_all(engine)
        with engine.begin() as conn:
            conn.execute(_unversioned_events.insert(), [_old_row(good), broken])
        migrations.upgrade(engine)
        assert set(inspect(engine).get_table_names()) == TABLES | {migrations.UNVERSIONED}
        assert SqlEventStore(engine).read(summary, scope=Scope()).queries == 1
        with engine.connect() as conn:  # only the row that could not be stored again is left there
            kept = conn.execute(select(Table(migrations.UNVERSIONED, MetaData(), autoload_with=conn).c.request_id))
            assert kept.scalars().all() == ["broken"]

    def test_only_the_unreadable_rows_stay_aside_past_one_batch(self, engine, monkeypatch) -> None:
        good = [_old_row(submitted(request_id=f"good-{i}")) for i in range(5)]
        broken = [_old_row(submitted(request_id=f"broken-{i}")) | {"payload": {"event_type": "QuerySubmitted"}}
                  for i in range(3)]
        _before_migrations.create_all(engine)
        with engine.begin() as conn:
            conn.execute(_unversioned_events.insert(), good + broken)
        read_again = migrations._read_again
        monkeypatch.setattr(migrations, "_read_again", lambda conn: read_again(conn, batch=2))
        migrations.upgrade(engine)
        assert SqlEventStore(engine).read(summary, scope=Scope()).queries == 5
        with engine.connect() as conn:
            kept = conn.execute(select(Table(migrations.UNVERSIONED, MetaData(), autoload_with=conn).c.request_id))
            assert sorted(kept.scalars()) == ["broken-0", "broken-1", "broken-2"]
