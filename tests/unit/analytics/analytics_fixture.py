"""A small day of traffic whose report figures are worked out by hand in analytics_report_contract.py.

The range [12:00, 12:10) on 2025-03-01 (UTC) holds eight requests:

| id | submitted | user | model  | question                     | outcome                  | latency | citations (supported) | confidence | tokens p/c/t |
|----|-----------|------|--------|------------------------------|--------------------------|---------|-----------------------|------------|--------------|
| a  | 12:00:10  | u1   | offline| How do I add a user?         | answered (guide, faq)    | 100     | 2 (2)                 | high       | 100/20/120   |
| b  | 12:00:40  | u2   | offline| how do I  add a USER?        | answered (guide, admin)  | 300     | 4 (3)                 | medium     | 200/40/240   |
| c  | 12:01:30  | u1   | offline| What is the refund policy?   | no_answer                | 50      | 0 (not reported)      | low        | 0/0/0        |
| d  | 12:03:05  | u3   | offline| hello                        | small_talk               | 5       | 0 (not reported)      | high       | 0/0/0        |
| e  | 12:03:20  | u2   | offline| Backup schedule?             | failed at retrieval      | 20      |                       |            |              |
| f  | 12:03:50  | u1   | gpt-x  | Export data                  | failed at generation     | 1000    |                       |            |              |
| g  | 12:04:00  | u4   | gpt-x  | Pending question             | pending (no outcome yet) |         |                       |            |              |
| h  | 12:06:30  | u3   | gpt-x  | what is the REFUND policy?   | answered (policy)        | 200     | 1 (0)                 | low        | 300/60/360   |

Ratings: a +1 at 12:05 then -1 at 12:06 "wrong steps" (the latest counts), b +1 at 12:10 "great", h +1 at
12:08. Outside the range: i (11:59:59, answered citing handbook, rated +1) and j (12:10:00, failed at
validation); a rating of a request analytics never saw ("zz"); and a's response delivered twice.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from services.analytics.domain import to_record
from tests.unit.analytics.analytics_events import T0, failed, feedback, responded, submitted

FROM, TO = T0, T0 + timedelta(minutes=10)
LIBRARY = ["admin", "faq", "guide", "handbook", "policy", "zeta"]


def at(minutes: int, seconds: int = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, seconds=seconds)


def _events() -> list:
    answer_a = responded(
        at=at(0, 11), request_id="a", total_ms=100.0, citations=2, kind="answer", confidence="High", supported=2,
        tokens=(100, 20, 120), docs=["guide", "faq"],
    )
    return [
        submitted(at=at(0, 10), request_id="a", user_id="u1", query="How do I add a user?"),
        answer_a,
        answer_a,  # delivered twice: stored once
        submitted(at=at(0, 40), request_id="b", user_id="u2", query="how do I  add a USER?"),
        responded(
            at=at(0, 41), request_id="b", total_ms=300.0, citations=4, kind="answer", confidence="Medium",
            supported=3, tokens=(200, 40, 240), docs=["guide", "admin"],
        ),
        submitted(at=at(1, 30), request_id="c", user_id="u1", query="What is the refund policy?"),
        responded(
            at=at(1, 31), request_id="c", answered=False, kind="no_information", model=None, total_ms=50.0,
            citations=0, confidence="Low",
        ),
        submitted(at=at(3, 5), request_id="d", user_id="u3", query="hello"),
        responded(at=at(3, 6), request_id="d", kind="small_talk", model=None, total_ms=5.0, citations=0,
                  confidence="High"),
        submitted(at=at(3, 20), request_id="e", user_id="u2", query="Backup schedule?"),
        failed(at=at(3, 21), request_id="e", stage="retrieval", total_ms=20.0),
        submitted(at=at(3, 50), request_id="f", user_id="u1", query="Export data", model="gpt-x"),
        failed(at=at(3, 51), request_id="f", stage="generation", error="llm_unavailable", total_ms=1000.0),
        submitted(at=at(4), request_id="g", user_id="u4", query="Pending question", model="gpt-x"),
        submitted(at=at(6, 30), request_id="h", user_id="u3", query="what is the REFUND policy?", model="gpt-x"),
        responded(
            at=at(6, 31), request_id="h", model="gpt-x", total_ms=200.0, citations=1, kind="answer",
            confidence="Low", supported=0, tokens=(300, 60, 360), docs=["policy"],
        ),
        feedback(at=at(5), rated_request_id="a", rating=1, user_id="u1"),
        feedback(at=at(6), rated_request_id="a", rating=-1, comment="wrong steps", user_id="u1"),
        feedback(at=at(10), rated_request_id="b", rating=1, comment="great", user_id="u2"),
        feedback(at=at(8), rated_request_id="h", rating=1, user_id="u3"),
        # Outside the range, or about no request analytics saw.
        submitted(at=at(0, -1), request_id="i", user_id="u5", query="How do I add a user?"),
        responded(at=at(0, 1), request_id="i", total_ms=10.0, citations=1, kind="answer", docs=["handbook"]),
        feedback(at=at(1), rated_request_id="i", rating=1),
        submitted(at=at(10), request_id="j", user_id="u5", query="Late question"),
        failed(at=at(10, 1), request_id="j", stage="validation", error="invalid_request", total_ms=1.0),
        feedback(at=at(2), rated_request_id="zz", rating=-1),
    ]


def load(store) -> None:
    """Add the fixture's events to `store`, in the order a broker might deliver them."""
    for event in _events():
        store.add(to_record(event))
