"""Behaviour every EventStore must have. Subclass with a `store` fixture to run it on an implementation."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from services.analytics.domain import EventStore, Summary, to_record
from tests.unit.analytics.analytics_events import T0, feedback, failed, responded, submitted


class StoreContract:
    @pytest.fixture
    def store(self) -> EventStore:
        raise NotImplementedError

    def test_empty_store_has_zero_counts_and_no_means(self, store: EventStore) -> None:
        assert store.summary() == Summary(queries=0, answered=0, unanswered=0, failed=0)

    def test_summary_of_a_hand_made_set(self, store: EventStore) -> None:
        events = [
            submitted(request_id="a"), submitted(request_id="b"), submitted(request_id="c"),
            responded(request_id="a", total_ms=100.0, citations=2),
            responded(request_id="b", total_ms=300.0, citations=4),
            responded(request_id="c", answered=False, total_ms=50.0, citations=0),
            failed(request_id="d"),
            feedback(rated_request_id="a"),
        ]
        for event in events:
            assert store.add(to_record(event)) is True
        assert store.summary() == Summary(
            queries=3, answered=2, unanswered=1, failed=1, mean_latency_ms=150.0, mean_citations=2.0
        )

    def test_the_same_event_twice_is_stored_once(self, store: EventStore) -> None:
        event = responded(total_ms=80.0, citations=3)
        assert store.add(to_record(event)) is True
        assert store.add(to_record(event)) is False
        summary = store.summary()
        assert (summary.answered, summary.mean_latency_ms, summary.mean_citations) == (1, 80.0, 3.0)

    def test_a_response_without_total_time_counts_but_has_no_latency(self, store: EventStore) -> None:
        store.add(to_record(responded(total_ms=None, citations=1)))
        store.add(to_record(responded(total_ms=40.0, citations=3)))
        summary = store.summary()
        assert (summary.answered, summary.mean_latency_ms, summary.mean_citations) == (2, 40.0, 2.0)

    def test_range_includes_from_and_excludes_to(self, store: EventStore) -> None:
        for minutes in (0, 10, 20):
            store.add(to_record(submitted(at=T0 + timedelta(minutes=minutes))))
        assert store.summary(start=T0, end=T0 + timedelta(minutes=20)).queries == 2
        assert store.summary(start=T0 + timedelta(minutes=10)).queries == 2
        assert store.summary(end=T0).queries == 0
        assert store.summary(start=T0 + timedelta(minutes=21)).queries == 0

    def test_times_in_other_offsets_compare_as_utc(self, store: EventStore) -> None:
        # 14:00 at +02:00 is 12:00 UTC.
        store.add(to_record(submitted(at=datetime(2025, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))))))
        assert store.summary(start=datetime(2025, 3, 1, 12, 0, tzinfo=UTC)).queries == 1
        assert store.summary(start=datetime(2025, 3, 1, 12, 0, 1, tzinfo=UTC)).queries == 0

    def test_ping_answers(self, store: EventStore) -> None:
        assert store.ping() is True
