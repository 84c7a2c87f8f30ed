from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from shared.errors import DependencyUnavailable
from tests.unit.analytics.analytics_events import responded, submitted
from tests.unit.analytics.analytics_fakes import FakeEventStore
from tests.unit.analytics.analytics_store_contract import StoreContract

pytestmark = pytest.mark.unit


class TestFakeStore(StoreContract):
    @pytest.fixture
    def store(self) -> FakeEventStore:
        return FakeEventStore()


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path):
        store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/nested/dir/analytics.db")
        store.create_schema()
        yield store
        store.close()


def test_sqlite_file_and_its_folder_are_created(tmp_path: Path) -> None:
    path = tmp_path / "new" / "analytics.db"
    store = SqlEventStore.from_url(f"sqlite:///{path}")
    store.create_schema()
    assert path.is_file()
    store.close()


def test_tables_are_created_on_first_use_when_start_up_skipped_it(tmp_path: Path) -> None:
    store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/a.db")
    assert store.add(to_record(submitted())) is True
    assert store.summary().queries == 1
    store.close()


def test_extracted_columns_and_full_payload_are_stored(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqlEventStore.from_url(f"sqlite:///{path}")
    event = responded(request_id="req-7", total_ms=123.0, citations=2)
    store.add(to_record(event))
    store.close()
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT event_type, request_id, answered, latency_ms, citation_count, model, payload FROM events"
        ).fetchone()
    assert row[:6] == ("ResponseGenerated", "req-7", 1, 123.0, 2, "offline")
    assert str(event.event_id) in row[6] and "How do I add a user?" in row[6]


def test_unreachable_database_raises_dependency_unavailable() -> None:
    store = SqlEventStore.from_url("postgresql://postgres@127.0.0.1:1/nothing", timeout_s=1)
    assert store.ping() is False
    with pytest.raises(DependencyUnavailable) as info:
        store.add(to_record(submitted()))
    assert info.value.code == "database_unavailable"
    with pytest.raises(DependencyUnavailable):
        store.summary()
