from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import summary
from shared.errors import DependencyUnavailable
from tests.unit.analytics.analytics_events import responded, submitted
from tests.unit.analytics.analytics_fakes import FakeEventStore
from tests.unit.analytics.analytics_store_contract import SqlStoreContract, StoreContract

pytestmark = pytest.mark.unit


class TestFakeStore(StoreContract):
    @pytest.fixture
    def store(self) -> FakeEventStore:
        return FakeEventStore()


class TestSqliteStore(StoreContract, SqlStoreContract):
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


def test_the_schema_is_migrated_on_first_use_when_start_up_skipped_it(tmp_path: Path) -> None:
    store = SqlEventStore.from_url(f"sqlite:///{tmp_path}/a.db")
    assert store.add(to_record(submitted())) is True
    assert store.read(summary, scope=Scope()).queries == 1
    store.close()


def test_extracted_columns_full_payload_and_cited_documents_are_stored(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqlEventStore.from_url(f"sqlite:///{path}")
    event = responded(request_id="req-7", total_ms=123.0, citations=3, kind="answer", confidence="High",
                      docs=["guide", "faq", "guide"], tokens=(10, 5, 15))
    store.add(to_record(event))
    store.add(to_record(event))
    store.close()
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT event_type, request_id, outcome, latency_ms, citation_count, model, confidence_level, "
            "total_tokens, query_key, payload FROM events"
        ).fetchone()
        cited = conn.execute("SELECT doc_id, request_id, count FROM cited_documents ORDER BY doc_id").fetchall()
    assert row[:9] == ("ResponseGenerated", "req-7", "answered", 123.0, 3, "offline", "high", 15,
                       "how do i add a user?")
    assert str(event.event_id) in row[9] and "How do I add a user?" in row[9]
    assert cited == [("faq", "req-7", 1), ("guide", "req-7", 2)]


def test_unreachable_database_raises_dependency_unavailable() -> None:
    store = SqlEventStore.from_url("postgresql://postgres@127.0.0.1:1/nothing", timeout_s=1)
    assert store.ping() is False
    with pytest.raises(DependencyUnavailable) as info:
        store.add(to_record(submitted()))
    assert info.value.code == "database_unavailable"
    with pytest.raises(DependencyUnavailable):
        store.read(summary, scope=Scope())
