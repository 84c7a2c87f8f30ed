from __future__ import annotations

from pathlib import Path

import pytest

from services.analytics.domain import to_record
from services.analytics.settings import Settings
from tests.unit.analytics.analytics_events import feedback, failed, responded, submitted

pytestmark = pytest.mark.unit


def test_response_fields_the_summary_needs_are_extracted() -> None:
    event = responded(request_id="r5", answered=False, total_ms=250.0, citations=0)
    record = to_record(event)
    assert (record.event_type, record.request_id, record.answered, record.latency_ms, record.citation_count) == (
        "ResponseGenerated", "r5", False, 250.0, 0,
    )
    assert record.model == "offline"
    assert record.payload["data"]["timings_ms"]["total"] == 250.0
    assert record.payload["event_id"] == str(event.event_id)


def test_other_events_keep_response_fields_empty() -> None:
    assert to_record(submitted()).answered is None
    assert to_record(failed()).latency_ms == 12.5
    record = to_record(feedback(rated_request_id="r1"))
    assert (record.answered, record.citation_count) == (None, None)
    assert record.payload["data"]["rated_request_id"] == "r1"


def test_default_database_is_a_sqlite_file_in_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'analytics.db'}"
    assert (settings.port, settings.prefetch) == (8003, 50)


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANALYTICS_PORT", "9103")
    monkeypatch.setenv("ANALYTICS_DB_URL", "postgresql+psycopg://u@db:5432/analytics")
    monkeypatch.setenv("ANALYTICS_PREFETCH", "7")
    settings = Settings()
    assert (settings.port, settings.database_url, settings.prefetch) == (
        9103, "postgresql+psycopg://u@db:5432/analytics", 7,
    )


def test_a_prefetch_below_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANALYTICS_PREFETCH", "0")
    with pytest.raises(ValueError):
        Settings()
