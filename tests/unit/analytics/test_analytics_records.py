from __future__ import annotations

from pathlib import Path

import pytest

from services.analytics.domain import query_key, to_record
from services.analytics.settings import Settings
from tests.unit.analytics.analytics_events import feedback, failed, responded, submitted

pytestmark = pytest.mark.unit


def test_response_fields_the_reports_need_are_extracted() -> None:
    event = responded(request_id="r5", total_ms=250.0, citations=3, kind="answer", confidence="Medium", supported=2,
                      tokens=(30, 10, 40), docs=["guide", "faq", "guide"], query="  Where are   BACKUPS? ")
    record = to_record(event)
    assert (record.event_type, record.request_id, record.outcome, record.latency_ms, record.citation_count) == (
        "ResponseGenerated", "r5", "answered", 250.0, 3,
    )
    assert (record.model, record.confidence_level, record.supported_citations) == ("offline", "medium", 2)
    assert (record.prompt_tokens, record.completion_tokens, record.total_tokens) == (30, 10, 40)
    assert record.cited_documents == (("guide", 2), ("faq", 1))
    assert (record.query_text, record.query_key) == ("  Where are   BACKUPS? ", "where are backups?")
    assert record.payload["data"]["timings_ms"]["total"] == 250.0
    assert record.payload["event_id"] == str(event.event_id)


def test_latency_ms_is_preferred_to_the_total_timing() -> None:
    event = responded(total_ms=250.0)
    event.data.latency_ms = 240.0
    assert to_record(event).latency_ms == 240.0


@pytest.mark.parametrize(
    ("kind", "answered", "outcome"),
    [
        ("answer", True, "answered"),
        ("no_information", False, "no_answer"),
        ("small_talk", True, "small_talk"),
        (None, True, "answered"),  # events from before `kind` existed
        (None, False, "no_answer"),
    ],
)
def test_the_outcome_of_a_response(kind: str | None, answered: bool, outcome: str) -> None:
    assert to_record(responded(kind=kind, answered=answered)).outcome == outcome


def test_failure_and_rating_fields() -> None:
    record = to_record(failed(stage="generation", error="llm_unavailable", total_ms=12.5))
    assert (record.outcome, record.failure_stage, record.error, record.latency_ms) == (
        "failed", "generation", "llm_unavailable", 12.5)
    record = to_record(feedback(rated_request_id="r1", rating=-1, comment="wrong"))
    assert (record.rated_request_id, record.rating, record.comment, record.outcome) == ("r1", -1, "wrong", None)
    assert record.payload["data"]["rated_request_id"] == "r1"


def test_a_question_keeps_its_text_model_and_no_outcome() -> None:
    record = to_record(submitted(query="Hello\tWorld", model="gpt-x"))
    assert (record.query_text, record.query_key, record.model, record.outcome) == ("Hello\tWorld", "hello world",
                                                                                   "gpt-x", None)


def test_query_key_lowers_and_collapses_whitespace() -> None:
    assert query_key("  How do I\n add  a USER? ") == "how do i add a user?"


def test_default_database_is_a_sqlite_file_in_the_data_dir(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'analytics.db'}"
    assert (settings.port, settings.prefetch, settings.retrieval_url) == (8003, 200, "http://127.0.0.1:8002")


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANALYTICS_PORT", "9103")
    monkeypatch.setenv("ANALYTICS_DB_URL", "postgresql+psycopg://u@db:5432/analytics")
    monkeypatch.setenv("ANALYTICS_PREFETCH", "7")
    monkeypatch.setenv("RETRIEVAL_URL", "http://retrieval:8002")
    monkeypatch.setenv("ANALYTICS_RETRIEVAL_TIMEOUT_S", "2.5")
    settings = Settings()
    assert (settings.port, settings.database_url, settings.prefetch) == (
        9103, "postgresql+psycopg://u@db:5432/analytics", 7,
    )
    assert (settings.retrieval_url, settings.retrieval_timeout_s) == ("http://retrieval:8002", 2.5)


def test_a_prefetch_below_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANALYTICS_PREFETCH", "0")
    with pytest.raises(ValueError):
        Settings()
