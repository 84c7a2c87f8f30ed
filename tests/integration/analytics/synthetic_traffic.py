"""Many requests' events, made up in bulk and stored straight into an analytics store (no broker), for the
tests that need a large table and for timing the reports.

Each request has a QuerySubmitted and, for all but every 50th (left pending), a ResponseGenerated or
QueryFailed a second later; every 10th answered request is rated, every 100th twice. Questions repeat
(300 distinct), two models share the traffic, and answers cite a few of 200 documents.
"""
from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from services.analytics.domain import EventRecord, to_record
from tests.unit.analytics.analytics_events import T0, failed, feedback, responded, submitted

QUESTIONS = 300
DOCUMENTS = 200


def request_events(index: int, *, spacing_s: float = 1.0) -> list:
    request_id = f"syn-{index:07d}"
    at = T0 + timedelta(seconds=index * spacing_s)
    model = "offline" if index % 3 else "gpt-x"
    query = f"Question number {index % QUESTIONS} about the handbook?"
    events = [submitted(at=at, request_id=request_id, user_id=f"user-{index % 97}", query=query, model=model)]
    if index % 50 == 49:
        return events
    later = at + timedelta(seconds=1)
    if index % 20 == 7:
        events.append(failed(at=later, request_id=request_id, stage="retrieval" if index % 2 else "generation"))
        return events
    no_answer = index % 9 == 4
    citations = 0 if no_answer else 1 + index % 3
    events.append(responded(
        at=later, request_id=request_id, answered=not no_answer, kind="no_information" if no_answer else "answer",
        model=model, total_ms=float(50 + index % 900), citations=citations, supported=citations,
        confidence=("High", "Medium", "Low")[index % 3], tokens=(100, 20, 120), query=query,
        docs=[f"doc-{(index + k * 7) % DOCUMENTS}" for k in range(citations)],
    ))
    if index % 10 == 0:
        events.append(feedback(at=later + timedelta(seconds=5), rated_request_id=request_id, rating=1))
    if index % 100 == 0:
        events.append(feedback(at=later + timedelta(seconds=9), rated_request_id=request_id, rating=-1,
                               comment="not what I asked"))
    return events


def records(requests: int, *, spacing_s: float = 1.0) -> Iterator[EventRecord]:
    for index in range(requests):
        for event in request_events(index, spacing_s=spacing_s):
            yield to_record(event)


def fill(store, requests: int, *, batch: int = 2000, spacing_s: float = 1.0) -> None:
    """Store the events of `requests` requests, `batch` events per transaction."""
    pending: list[EventRecord] = []
    for record in records(requests, spacing_s=spacing_s):
        pending.append(record)
        if len(pending) == batch:
            store.add_many(pending)
            pending = []
    store.add_many(pending)
