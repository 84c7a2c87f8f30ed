"""The reports over a real SQL store, checked against figures worked out by hand from analytics_fixture.py.
Subclass with a `store` fixture (an empty, migrated SqlEventStore) to run them on a backend."""
from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import numpy
import pytest
from pytest import approx

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.errors import TooManyBuckets
from services.analytics.pricing import ModelPrice
from services.analytics.reports import export
from services.analytics.reports.documents import documents
from services.analytics.reports.feedback import feedback
from services.analytics.reports.per_model import models
from services.analytics.reports.queries import content_gaps, top_queries
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import summary
from services.analytics.reports.timeseries import timeseries
from tests.unit.analytics.analytics_events import T0, failed, feedback as rated, responded, submitted
from tests.unit.analytics.analytics_fixture import FROM, LIBRARY, TO, at, load

RANGE = Scope(start=FROM, end=TO)


def minute(m: int) -> datetime:
    return T0 + timedelta(minutes=m)


def empty_point(m: int) -> dict:
    return {"start": minute(m), "queries": 0, "answered": 0, "no_answer": 0, "failed": 0, "answered_rate": None,
            "latency_ms": {"p50": None, "p95": None, "p99": None}}


class ReportsContract:
    @pytest.fixture
    def store(self) -> SqlEventStore:
        raise NotImplementedError

    @pytest.fixture
    def loaded(self, store: SqlEventStore) -> SqlEventStore:
        load(store)
        return store

    def test_summary_of_the_range(self, loaded: SqlEventStore) -> None:
        body = loaded.read(summary, scope=RANGE).model_dump()
        assert body == {
            "from_": FROM, "to": TO, "model": None,
            "queries": 8, "distinct_users": 4, "completed": 7,
            "answered": 3, "no_answer": 1, "small_talk": 1, "failed": 2,
            "answered_rate": approx(3 / 7), "no_answer_rate": approx(1 / 7), "failure_rate": approx(2 / 7),
            "failures_by_stage": {"generation": 1, "retrieval": 1},
            # latencies 5, 20, 50, 100, 200, 300, 1000: p95 = 300 + 0.7 * 700, p99 = 300 + 0.94 * 700
            "latency_ms": {"p50": 100.0, "p95": approx(790.0), "p99": approx(958.0)},
            "mean_latency_ms": approx(1675 / 7),
            "mean_citations": approx(7 / 3),  # a 2, b 4, h 1
            "supported_citation_rate": approx(5 / 7),  # (2 + 3 + 0) / (2 + 4 + 1)
            "confidence": {"high": 2, "medium": 1, "low": 2},
            "feedback": {"ratings": 3, "positive": 2, "negative": 1, "score": approx(1 / 3)},  # a's latest is -1
            "tokens": {"prompt": 600, "completion": 120, "total": 720},
        }

    def test_summary_of_one_model(self, loaded: SqlEventStore) -> None:
        body = loaded.read(summary, scope=Scope(start=FROM, end=TO, model="gpt-x")).model_dump()
        assert body == {
            "from_": FROM, "to": TO, "model": "gpt-x",
            "queries": 3, "distinct_users": 3, "completed": 2,
            "answered": 1, "no_answer": 0, "small_talk": 0, "failed": 1,
            "answered_rate": 0.5, "no_answer_rate": 0.0, "failure_rate": 0.5,
            "failures_by_stage": {"generation": 1},
            "latency_ms": {"p50": 600.0, "p95": approx(960.0), "p99": approx(992.0)},
            "mean_latency_ms": 600.0,
            "mean_citations": 1.0,
            "supported_citation_rate": 0.0,
            "confidence": {"high": 0, "medium": 0, "low": 1},
            "feedback": {"ratings": 1, "positive": 1, "negative": 0, "score": 1.0},
            "tokens": {"prompt": 300, "completion": 60, "total": 360},
        }

    def test_summary_of_nothing_has_zeros_and_nulls(self, store: SqlEventStore) -> None:
        body = store.read(summary, scope=Scope()).model_dump()
        assert body == {
            "from_": None, "to": None, "model": None,
            "queries": 0, "distinct_users": 0, "completed": 0, "answered": 0, "no_answer": 0, "small_talk": 0,
            "failed": 0, "answered_rate": None, "no_answer_rate": None, "failure_rate": None,
            "failures_by_stage": {}, "latency_ms": {"p50": None, "p95": None, "p99": None},
            "mean_latency_ms": None, "mean_citations": None, "supported_citation_rate": None,
            "confidence": {"high": 0, "medium": 0, "low": 0},
            "feedback": {"ratings": 0, "positive": 0, "negative": 0, "score": None},
            "tokens": {"prompt": 0, "completion": 0, "total": 0},
        }

    def test_minute_series_fills_the_empty_buckets(self, loaded: SqlEventStore) -> None:
        body = loaded.read(timeseries, scope=RANGE, bucket="minute").model_dump()
        assert (body["bucket"], body["from_"], body["to"]) == ("minute", FROM, TO)
        assert body["points"] == [
            {"start": minute(0), "queries": 2, "answered": 2, "no_answer": 0, "failed": 0, "answered_rate": 1.0,
             "latency_ms": {"p50": 200.0, "p95": approx(290.0), "p99": approx(298.0)}},  # 100 and 300
            {"start": minute(1), "queries": 1, "answered": 0, "no_answer": 1, "failed": 0, "answered_rate": 0.0,
             "latency_ms": {"p50": 50.0, "p95": 50.0, "p99": 50.0}},
            empty_point(2),
            {"start": minute(3), "queries": 3, "answered": 0, "no_answer": 0, "failed": 2, "answered_rate": 0.0,
             "latency_ms": {"p50": 20.0, "p95": approx(902.0), "p99": approx(980.4)}},  # 5, 20 and 1000
            {"start": minute(4), "queries": 1, "answered": 0, "no_answer": 0, "failed": 0, "answered_rate": None,
             "latency_ms": {"p50": None, "p95": None, "p99": None}},  # g is pending
            empty_point(5),
            {"start": minute(6), "queries": 1, "answered": 1, "no_answer": 0, "failed": 0, "answered_rate": 1.0,
             "latency_ms": {"p50": 200.0, "p95": 200.0, "p99": 200.0}},
            empty_point(7), empty_point(8), empty_point(9),
        ]

    def test_hour_and_day_series_hold_one_point_each(self, loaded: SqlEventStore) -> None:
        for bucket, start in (("hour", T0), ("day", T0.replace(hour=0))):
            points = loaded.read(timeseries, scope=RANGE, bucket=bucket).model_dump()["points"]
            assert points == [
                {"start": start, "queries": 8, "answered": 3, "no_answer": 1, "failed": 2,
                 "answered_rate": approx(3 / 7), "latency_ms": {"p50": 100.0, "p95": approx(790.0), "p99": approx(958.0)}}
            ]

    def test_series_without_a_range_runs_from_the_first_to_the_last_request(self, loaded: SqlEventStore) -> None:
        points = loaded.read(timeseries, scope=Scope(), bucket="minute").model_dump()["points"]
        assert [p["start"] for p in points] == [minute(m) for m in range(-1, 11)]
        assert (points[0]["queries"], points[0]["answered"], points[0]["latency_ms"]["p50"]) == (1, 1, 10.0)  # i
        assert (points[-1]["queries"], points[-1]["failed"], points[-1]["answered_rate"]) == (1, 1, 0.0)  # j

    def test_series_of_an_empty_range_or_store_has_no_points(self, loaded: SqlEventStore, tmp_path) -> None:
        assert loaded.read(timeseries, scope=Scope(start=FROM, end=FROM), bucket="minute").points == []
        assert loaded.read(timeseries, scope=Scope(start=TO + timedelta(days=1)), bucket="hour").points == []
        assert loaded.read(timeseries, scope=Scope(model="no-such-model"), bucket="day").points == []

    def test_a_range_with_no_data_still_lists_its_buckets(self, store: SqlEventStore) -> None:
        points = store.read(timeseries, scope=Scope(start=T0, end=T0 + timedelta(hours=3)), bucket="hour").points
        assert [p.start for p in points] == [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
        assert all(p.queries == 0 and p.answered_rate is None for p in points)

    def test_more_than_ten_thousand_buckets_is_refused(self, store: SqlEventStore) -> None:
        ok = Scope(start=T0, end=T0 + timedelta(minutes=10_000))
        assert len(store.read(timeseries, scope=ok, bucket="minute").points) == 10_000
        with pytest.raises(TooManyBuckets) as info:
            store.read(timeseries, scope=Scope(start=T0, end=T0 + timedelta(minutes=10_001)), bucket="minute")
        assert (info.value.status_code, info.value.code) == (422, "invalid_request")
        assert "10,001 minute buckets" in info.value.message

    def test_series_in_a_time_zone_follow_its_clock(self, store: SqlEventStore) -> None:
        # 05:xx and 06:xx UTC on 2026-11-01 are both 01:xx in New York, before and after its clocks go back;
        # 02:00 UTC is still 31 October there.
        moments = [(2, 0), (5, 10), (5, 11), (5, 12), (6, 10), (6, 11), (6, 12), (6, 13)]
        for n, (hour, minute) in enumerate(moments):
            store.add(to_record(submitted(at=datetime(2026, 11, 1, hour, minute, tzinfo=UTC), request_id=f"z{n}")))

        def series(scope: Scope, bucket: str, tz: str) -> list[tuple[str, int]]:
            body = store.read(timeseries, scope=scope, bucket=bucket, tz=tz)
            assert body.tz == tz
            return [(p.start.isoformat(), p.queries) for p in body.points]

        night = Scope(start=datetime(2026, 11, 1, 4, tzinfo=UTC), end=datetime(2026, 11, 1, 8, tzinfo=UTC))
        assert series(night, "hour", "America/New_York") == [
            ("2026-11-01T00:00:00-04:00", 0), ("2026-11-01T01:00:00-04:00", 3),
            ("2026-11-01T01:00:00-05:00", 4), ("2026-11-01T02:00:00-05:00", 0),
        ]
        assert series(Scope(), "day", "America/New_York") == [("2026-10-31T00:00:00-04:00", 1),
                                                               ("2026-11-01T00:00:00-04:00", 7)]
        assert series(Scope(), "day", "UTC") == [("2026-11-01T00:00:00+00:00", 8)]
        assert series(night, "hour", "Asia/Kolkata") == [
            ("2026-11-01T09:00:00+05:30", 0), ("2026-11-01T10:00:00+05:30", 3),
            ("2026-11-01T11:00:00+05:30", 4), ("2026-11-01T12:00:00+05:30", 0), ("2026-11-01T13:00:00+05:30", 0),
        ]

    def test_top_queries_group_case_and_spacing(self, loaded: SqlEventStore) -> None:
        items = loaded.read(top_queries, scope=RANGE, limit=20).model_dump()["items"]
        assert items == [
            {"query": "What is the refund policy?", "count": 2, "answered": 1, "last_asked": at(6, 30)},
            {"query": "How do I add a user?", "count": 2, "answered": 2, "last_asked": at(0, 40)},
            {"query": "Pending question", "count": 1, "answered": 0, "last_asked": at(4)},
            {"query": "Export data", "count": 1, "answered": 0, "last_asked": at(3, 50)},
            {"query": "Backup schedule?", "count": 1, "answered": 0, "last_asked": at(3, 20)},
            {"query": "hello", "count": 1, "answered": 0, "last_asked": at(3, 5)},
        ]
        assert [i.query for i in loaded.read(top_queries, scope=RANGE, limit=2).items] == [
            "What is the refund policy?", "How do I add a user?",
        ]

    def test_content_gaps_are_no_answer_or_low_confidence(self, loaded: SqlEventStore) -> None:
        items = loaded.read(content_gaps, scope=RANGE, limit=20).model_dump()["items"]
        assert items == [
            {"query": "What is the refund policy?", "count": 2, "no_answer": 1, "low_confidence": 1,
             "last_asked": at(6, 30), "last_request_id": "h"},
        ]
        assert loaded.read(content_gaps, scope=Scope(start=FROM, end=at(6)), limit=20).model_dump()["items"] == [
            {"query": "What is the refund policy?", "count": 1, "no_answer": 1, "low_confidence": 0,
             "last_asked": at(1, 30), "last_request_id": "c"},
        ]

    def test_most_and_never_cited_documents(self, loaded: SqlEventStore) -> None:
        body = loaded.read(documents, scope=RANGE, library=LIBRARY, limit=20).model_dump()
        assert body["most_cited"] == [
            {"doc_id": "guide", "citations": 2, "requests": 2},  # a's response came twice, counted once
            {"doc_id": "admin", "citations": 1, "requests": 1},
            {"doc_id": "faq", "citations": 1, "requests": 1},
            {"doc_id": "policy", "citations": 1, "requests": 1},
        ]
        assert body["never_cited"] == ["handbook", "zeta"]  # handbook is cited only by i, before the range
        assert body["never_cited_total"] == 2
        limited = loaded.read(documents, scope=RANGE, library=LIBRARY, limit=1)
        assert ([d.doc_id for d in limited.most_cited], limited.never_cited) == (["guide"], ["handbook"])
        assert limited.never_cited_total == 2  # the list was cut to one: the total says one more
        everything = loaded.read(documents, scope=Scope(), library=LIBRARY, limit=20)
        assert (everything.never_cited, everything.never_cited_total) == (["zeta"], 1)

    def test_figures_per_model(self, loaded: SqlEventStore) -> None:
        prices = {"gpt-x": ModelPrice(input=1.5, output=6.0)}  # US dollars per million tokens; offline has none
        assert loaded.read(models, scope=RANGE, limit=20, prices=prices).model_dump()["items"] == [
            {"model": "offline", "requests": 5, "share": approx(5 / 7),
             "latency_ms": {"p50": 50.0, "p95": approx(260.0), "p99": approx(292.0)},  # 5, 20, 50, 100, 300
             "tokens": {"prompt": 300, "completion": 60, "total": 360}, "mean_total_tokens": 90.0, "cost_usd": None},
            {"model": "gpt-x", "requests": 2, "share": approx(2 / 7),
             "latency_ms": {"p50": 600.0, "p95": approx(960.0), "p99": approx(992.0)},  # 200, 1000
             "tokens": {"prompt": 300, "completion": 60, "total": 360}, "mean_total_tokens": 360.0,
             "cost_usd": approx((300 * 1.5 + 60 * 6.0) / 1_000_000)},
        ]

    def test_a_models_share_under_the_model_filter_is_of_every_models_requests(
        self, loaded: SqlEventStore
    ) -> None:
        for name, requests, share in (("gpt-x", 2, 2 / 7), ("offline", 5, 5 / 7)):
            items = loaded.read(models, scope=Scope(start=FROM, end=TO, model=name), limit=20).items
            assert [(m.model, m.requests, m.share) for m in items] == [(name, requests, approx(share))]
        assert loaded.read(models, scope=Scope(start=FROM, end=TO, model="no-such-model"), limit=20).items == []

    def test_the_model_filter_selects_what_the_models_report_counts_under_each_name(
        self, store: SqlEventStore
    ) -> None:
        # n names no model at all; k is a model that calls itself "unknown": the report puts both under `unknown`.
        store.add(to_record(submitted(request_id="n", model=None)))
        store.add(to_record(responded(request_id="n", model=None, total_ms=40.0, tokens=(1, 2, 3))))
        store.add(to_record(submitted(request_id="k", model="unknown")))
        store.add(to_record(failed(request_id="k", total_ms=60.0)))
        store.add(to_record(submitted(request_id="o")))
        store.add(to_record(responded(request_id="o", total_ms=10.0)))
        store.add(to_record(submitted(request_id="p", model=None)))  # pending: in the summary's queries only
        listed = {item.model: item for item in store.read(models, scope=Scope(), limit=20).items}
        assert {name: item.requests for name, item in listed.items()} == {"unknown": 2, "offline": 1}
        for name, item in listed.items():
            chosen = Scope(model=name)
            body = store.read(summary, scope=chosen)
            assert (body.model, body.completed, body.tokens.total) == (name, item.requests, item.tokens.total)
            assert [m.model for m in store.read(models, scope=chosen, limit=20).items] == [name]
        unknown = store.read(summary, scope=Scope(model="unknown"))
        assert (unknown.queries, unknown.answered, unknown.failed, unknown.latency_ms.p50) == (3, 1, 1, 50.0)
        assert sum(p.queries for p in store.read(timeseries, scope=Scope(model="unknown"), bucket="day").points) == 3
        exported = "".join(export.csv_chunks(store.stream(export.statement(Scope(model="unknown")))))
        assert [r["request_id"] for r in csv.DictReader(io.StringIO(exported))] == ["k", "n", "p"]

    def test_feedback_lists_each_rated_request_once_with_its_latest_rating(self, loaded: SqlEventStore) -> None:
        body = loaded.read(feedback, scope=RANGE, limit=20).model_dump()
        assert body["figures"] == {"ratings": 3, "positive": 2, "negative": 1, "score": approx(1 / 3)}
        assert body["items"] == [
            {"rated_request_id": "b", "rating": 1, "comment": "great", "rated_at": at(10), "user_id": "u2",
             "query": "how do I  add a USER?"},
            {"rated_request_id": "h", "rating": 1, "comment": None, "rated_at": at(8), "user_id": "u3",
             "query": "what is the REFUND policy?"},
            {"rated_request_id": "a", "rating": -1, "comment": "wrong steps", "rated_at": at(6), "user_id": "u1",
             "query": "How do I add a user?"},
        ]

    def test_export_has_one_row_per_request(self, loaded: SqlEventStore) -> None:
        text = "".join(export.csv_chunks(loaded.stream(export.statement(RANGE)), rows_per_chunk=3))
        rows = list(csv.DictReader(io.StringIO(text)))
        assert [r["request_id"] for r in rows] == ["a", "b", "c", "d", "e", "f", "g", "h"]
        assert rows[0] == {
            "request_id": "a", "submitted_at": "2025-03-01T12:00:10Z", "user_id": "u1", "session_id": "",
            "trace_id": "", "conversation_id": "", "query": "How do I add a user?", "model": "offline",
            "outcome": "answered", "completed_at": "2025-03-01T12:00:11Z", "latency_ms": "100.0",
            "confidence_level": "high", "confidence_score": "", "citation_count": "2", "supported_citations": "2",
            "grounding_score": "", "prompt_tokens": "100", "completion_tokens": "20", "total_tokens": "120",
            "failure_stage": "", "failure_error": "", "rating": "-1", "comment": "wrong steps",
            "rated_at": "2025-03-01T12:06:00Z",
        }
        assert (rows[5]["outcome"], rows[5]["failure_stage"], rows[5]["failure_error"]) == (
            "failed", "generation", "llm_unavailable")
        assert (rows[6]["outcome"], rows[6]["latency_ms"]) == ("pending", "")

    def test_export_defuses_text_a_spreadsheet_would_run(self, store: SqlEventStore) -> None:
        store.add(to_record(submitted(request_id="-1-1", query="=HYPERLINK(\"http://evil\")", model="@SUM(1+1)")))
        store.add(to_record(rated(rated_request_id="-1-1", rating=-1, comment="+1 useless")))
        text = "".join(export.csv_chunks(store.stream(export.statement(Scope()))))
        row = next(csv.DictReader(io.StringIO(text)))
        assert (row["query"], row["comment"]) == ("'=HYPERLINK(\"http://evil\")", "'+1 useless")
        assert row["model"] == "'@SUM(1+1)"  # as an LLM endpoint named itself
        assert row["request_id"] == "'-1-1"  # a caller's own X-Request-ID

    def test_ties_come_in_code_point_order_on_every_backend(self, store: SqlEventStore) -> None:
        # A language's collation (PostgreSQL's en_US, say) would put "doc_b" before "Doc-a" and "x_b" before
        # "X-a", and the limit would keep other items than on SQLite.
        for rid, doc, query, model in (("x_b", "doc_b", "b_q", "m_b"), ("X-a", "Doc-a", "B-q", "M-a"),
                                       ("x.c", "doc.c", "b.q", "m.c")):
            store.add(to_record(submitted(request_id=rid, query=query, model=model)))
            store.add(to_record(responded(at=T0 + timedelta(seconds=1), request_id=rid, docs=[doc], citations=1,
                                          model=model, query=query, kind="no_information", answered=False)))
            store.add(to_record(rated(at=T0 + timedelta(hours=1), rated_request_id=rid)))
        cited = store.read(documents, scope=Scope(), library=[], limit=2).most_cited
        assert [item.doc_id for item in cited] == ["Doc-a", "doc.c"]
        assert [item.model for item in store.read(models, scope=Scope(), limit=2).items] == ["M-a", "m.c"]
        assert [item.query for item in store.read(top_queries, scope=Scope(), limit=2).items] == ["B-q", "b.q"]
        assert [item.query for item in store.read(content_gaps, scope=Scope(), limit=2).items] == ["B-q", "b.q"]
        assert [item.rated_request_id for item in store.read(feedback, scope=Scope(), limit=2).items] == [
            "X-a", "x.c"]
        text = "".join(export.csv_chunks(store.stream(export.statement(Scope()))))
        assert [row["request_id"] for row in csv.DictReader(io.StringIO(text))] == ["X-a", "x.c", "x_b"]

    def test_the_latest_outcome_of_a_request_is_its_outcome(self, store: SqlEventStore) -> None:
        store.add(to_record(submitted(request_id="r")))
        store.add(to_record(responded(at=T0 + timedelta(seconds=2), request_id="r", total_ms=70.0)))
        store.add(to_record(failed(at=T0 + timedelta(seconds=1), request_id="r", total_ms=30.0)))
        body = store.read(summary, scope=Scope())
        assert (body.queries, body.failed, body.answered, body.mean_latency_ms) == (1, 0, 1, 70.0)

    def test_a_request_sent_again_is_one_question_as_last_asked_with_its_latest_outcome(
        self, store: SqlEventStore
    ) -> None:
        # Refused after chat recorded it (another user's conversation), then sent again with its X-Request-ID.
        store.add_many([to_record(event) for event in (
            submitted(request_id="again", query="How do I add a usr?"),
            failed(at=T0 + timedelta(seconds=1), request_id="again", stage="conversation",
                   error="conversation_not_found"),
            submitted(at=T0 + timedelta(seconds=5), request_id="again"),
            responded(at=T0 + timedelta(seconds=6), request_id="again", total_ms=80.0, citations=1, docs=["guide"]),
            rated(at=T0 + timedelta(seconds=9), rated_request_id="again", rating=1),
        )])
        body = store.read(summary, scope=Scope())
        assert (body.queries, body.completed, body.answered, body.failed) == (1, 1, 1, 0)
        assert (body.failures_by_stage, body.mean_latency_ms, body.feedback.ratings) == ({}, 80.0, 1)
        assert [(i.query, i.count, i.answered) for i in store.read(top_queries, scope=Scope(), limit=5).items] == [
            ("How do I add a user?", 1, 1)
        ]
        assert store.read(timeseries, scope=Scope(), bucket="day").points[0].queries == 1
        cited = store.read(documents, scope=Scope(), library=["guide"], limit=5).most_cited
        assert [(d.doc_id, d.citations, d.requests) for d in cited] == [("guide", 1, 1)]
        rows = list(csv.DictReader(io.StringIO("".join(export.csv_chunks(store.stream(export.statement(Scope())))))))
        assert [(r["request_id"], r["submitted_at"], r["outcome"]) for r in rows] == [
            ("again", "2025-03-01T12:00:05Z", "answered")
        ]

    def test_a_request_sent_again_is_pending_until_its_last_try_has_an_outcome(self, store: SqlEventStore) -> None:
        # The refusal belongs to the first try: the question as last asked is still in flight.
        store.add_many([to_record(event) for event in (
            submitted(request_id="again"),
            failed(at=T0 + timedelta(seconds=1), request_id="again", stage="conversation",
                   error="conversation_not_found", total_ms=5.0),
            submitted(at=T0 + timedelta(seconds=5), request_id="again"),
        )])
        body = store.read(summary, scope=Scope())
        assert (body.queries, body.completed, body.failed, body.failures_by_stage) == (1, 0, 0, {})
        assert (body.failure_rate, body.mean_latency_ms) == (None, None)
        assert store.read(models, scope=Scope(), limit=5).items == []
        rows = list(csv.DictReader(io.StringIO("".join(export.csv_chunks(store.stream(export.statement(Scope())))))))
        assert [(r["submitted_at"], r["outcome"], r["completed_at"], r["latency_ms"]) for r in rows] == [
            ("2025-03-01T12:00:05Z", "pending", "", "")
        ]

    @pytest.mark.parametrize(
        "latencies",
        [[42.0], [10.0, 30.0], [7.0, 7.0, 7.0], [5.0, 5.0, 5.0, 10.0], [3.5, 1.0, 8.25, 1.0, 99.0, 8.25, 0.5],
         [float(v) for v in range(1, 101)]],
        ids=["one", "two", "all-equal", "ties", "unordered", "one-to-hundred"],
    )
    def test_latency_percentiles_are_numpys(self, store: SqlEventStore, latencies: list[float]) -> None:
        for n, latency in enumerate(latencies):
            store.add(to_record(submitted(request_id=f"p{n}")))
            store.add(to_record(responded(request_id=f"p{n}", total_ms=latency)))
        expected = numpy.percentile(latencies, [50, 95, 99])
        for figures in (store.read(summary, scope=Scope()).latency_ms,
                        store.read(timeseries, scope=Scope(), bucket="day").points[0].latency_ms,
                        store.read(models, scope=Scope(), limit=1).items[0].latency_ms):
            assert [figures.p50, figures.p95, figures.p99] == list(expected)
