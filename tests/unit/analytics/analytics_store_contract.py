"""Behaviour every EventStore must have. Subclass with a `store` fixture to run it on an implementation."""
from __future__ import annotations

import pytest

from services.analytics.domain import EventStore, to_record
from tests.unit.analytics.analytics_events import feedback, failed, responded, submitted


class StoreContract:
    @pytest.fixture
    def store(self) -> EventStore:
        raise NotImplementedError

    def test_each_event_is_new_once(self, store: EventStore) -> None:
        events = [submitted(request_id="a"), responded(request_id="a"), failed(request_id="b"), feedback()]
        assert [store.add(to_record(event)) for event in events] == [True] * 4
        assert [store.add(to_record(event)) for event in events] == [False] * 4

    def test_an_event_with_the_same_content_but_another_id_is_new(self, store: EventStore) -> None:
        first = submitted(request_id="a")
        assert store.add(to_record(first)) is True
        assert store.add(to_record(first.model_copy(update={"event_id": submitted().event_id}))) is True

    def test_ping_answers(self, store: EventStore) -> None:
        assert store.ping() is True
