"""Behaviour every EventStore must have, and what the SQL store must also write. Subclass with a `store`
fixture to run them on an implementation: StoreContract for any EventStore, SqlStoreContract for an empty,
migrated SqlEventStore."""
from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from services.analytics.adapters.schema import cited_documents, events
from services.analytics.adapters.sql_store import SqlEventStore
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

    def test_a_batch_says_of_each_record_whether_it_was_new(self, store: EventStore) -> None:
        stored, fresh = submitted(request_id="a"), [responded(request_id="a"), failed(request_id="b"), feedback()]
        assert store.add(to_record(stored)) is True
        batch = [to_record(event) for event in [fresh[0], stored, *fresh[1:]]]
        assert store.add_many(batch) == [True, False, True, True]
        assert store.add_many(batch) == [False] * 4
        assert store.add(to_record(fresh[2])) is False

    def test_an_event_twice_in_one_batch_is_new_once(self, store: EventStore) -> None:
        twice, once = to_record(responded(request_id="t")), to_record(submitted(request_id="o"))
        assert store.add_many([twice, once, twice, twice]) == [True, True, False, False]
        assert store.add_many([once, twice]) == [False, False]

    def test_an_empty_batch_is_nothing_new(self, store: EventStore) -> None:
        assert store.add_many([]) == []

    def test_ping_answers(self, store: EventStore) -> None:
        assert store.ping() is True


class SqlStoreContract:
    @pytest.fixture
    def store(self) -> SqlEventStore:
        raise NotImplementedError

    def test_a_batch_writes_cited_documents_for_its_new_events_only(self, store: SqlEventStore) -> None:
        earlier = responded(request_id="earlier", docs=["guide", "faq"])
        batch = [
            responded(request_id="new", docs=["guide", "faq", "guide"]),
            earlier,
            responded(request_id="twice", docs=["faq"]),
        ]
        store.add(to_record(earlier))
        assert store.add_many([to_record(event) for event in [*batch, batch[2]]]) == [True, False, True, False]
        assert store.add_many([to_record(earlier)]) == [False]
        with store.engine.connect() as conn:
            cited = conn.execute(
                select(cited_documents.c.request_id, cited_documents.c.doc_id, cited_documents.c.count)
                .order_by(cited_documents.c.request_id, cited_documents.c.doc_id)
            ).all()
        assert [tuple(row) for row in cited] == [
            ("earlier", "faq", 1), ("earlier", "guide", 1), ("new", "faq", 1), ("new", "guide", 2), ("twice", "faq", 1),
        ]

    def test_a_batch_is_committed_whole_or_not_at_all(self, store: SqlEventStore) -> None:
        good = to_record(responded(request_id="good", docs=["guide"]))
        unstorable = dataclasses.replace(to_record(submitted(request_id="bad")), event_type=None)  # NOT NULL
        with pytest.raises(IntegrityError) as info:
            store.add_many([good, unstorable])
        assert "event_type" in str(info.value)
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(events)).scalar() == 0
            assert conn.execute(select(func.count()).select_from(cited_documents)).scalar() == 0
        assert store.add_many([good]) == [True]

    def test_a_batch_keeps_every_extracted_column(self, store: SqlEventStore) -> None:
        answer = responded(request_id="cols", total_ms=321.0, citations=3, confidence="High", tokens=(10, 5, 15))
        question = submitted(request_id="cols", query="  How   do I ADD a user? ")
        store.add_many([to_record(question), to_record(answer)])
        with store.engine.connect() as conn:
            rows = conn.execute(
                select(events.c.event_type, events.c.latency_ms, events.c.citation_count,
                       events.c.confidence_level, events.c.total_tokens, events.c.query_key, events.c.payload)
                .order_by(events.c.event_type)
            ).all()
        assert [tuple(row[:6]) for row in rows] == [
            ("QuerySubmitted", None, None, None, None, "how do i add a user?"),
            ("ResponseGenerated", 321.0, 3, "high", 15, "how do i add a user?"),
        ]
        assert rows[0].payload["event_id"] == str(question.event_id)

    def test_a_nul_character_is_stored_as_a_replacement_character(self, store: SqlEventStore) -> None:
        # PostgreSQL refuses U+0000 in text and jsonb: the events stay storable, the same on every backend.
        question = submitted(request_id="nul", query="how do I log\x00 out")
        answer = responded(request_id="nul", docs=["guide\x00.md"], query="how do I log\x00 out")
        rating = feedback(rated_request_id="nul", comment="wrong\x00")
        assert store.add_many([to_record(question), to_record(answer), to_record(rating)]) == [True, True, True]
        with store.engine.connect() as conn:
            rows = conn.execute(
                select(events.c.event_type, events.c.query_text, events.c.comment, events.c.payload)
                .order_by(events.c.event_type)
            ).all()
            cited = conn.execute(select(cited_documents.c.doc_id)).scalars().all()
        assert [tuple(row[:3]) for row in rows] == [
            ("FeedbackReceived", None, "wrong\ufffd"),
            ("QuerySubmitted", "how do I log\ufffd out", None),
            ("ResponseGenerated", "how do I log\ufffd out", None),
        ]
        assert rows[1].payload["data"]["query"] == "how do I log\ufffd out"
        assert cited == ["guide\ufffd.md"]

    def test_a_value_longer_than_its_column_is_cut_to_fit_and_kept_whole_in_the_payload(self, store: SqlEventStore) -> None:
        # PostgreSQL refuses an over-long value, and with it the event: a model name is whatever the LLM reports.
        model = "vendor/" + "m" * 300
        answer = responded(request_id="long", model=model, docs=["d" * 600 + "a", "d" * 600 + "b", "short.md"])
        assert store.add_many([to_record(answer)]) == [True]
        with store.engine.connect() as conn:
            stored = conn.execute(select(events.c.model, events.c.payload)).one()
            cited = conn.execute(select(cited_documents.c.doc_id, cited_documents.c.count)).all()
        assert stored.model == model[:128] and stored.payload["data"]["model"] == model
        assert sorted(tuple(row) for row in cited) == [("d" * 512, 2), ("short.md", 1)]

    def test_a_count_beyond_its_32_bit_column_is_stored_as_the_largest_it_holds(self, store: SqlEventStore) -> None:
        # Token counts are what the LLM endpoint reports; PostgreSQL would refuse the event whole.
        answer = responded(request_id="many", tokens=(3_000_000_000, 5, 3_000_000_005))
        assert store.add_many([to_record(answer)]) == [True]
        with store.engine.connect() as conn:
            stored = conn.execute(
                select(events.c.prompt_tokens, events.c.completion_tokens, events.c.total_tokens, events.c.payload)
            ).one()
        assert tuple(stored[:3]) == (2**31 - 1, 5, 2**31 - 1)
        assert stored.payload["data"]["usage"]["prompt_tokens"] == 3_000_000_000
