"""Hand-written doubles for the analytics unit tests."""
from __future__ import annotations

from datetime import datetime

from services.analytics.domain import EventRecord, Summary
from shared.errors import DependencyUnavailable


class FakeEventStore:
    """EventStore in memory. Set `down` to act as an unreachable database, `broken` to raise anything else."""

    def __init__(self) -> None:
        self.rows: dict[str, EventRecord] = {}
        self.down = False
        self.broken: Exception | None = None
        self.add_calls = 0

    def add(self, record: EventRecord) -> bool:
        self.add_calls += 1
        self._check()
        if str(record.event_id) in self.rows:
            return False
        self.rows[str(record.event_id)] = record
        return True

    def summary(self, *, start: datetime | None = None, end: datetime | None = None) -> Summary:
        self._check()
        rows = [
            r for r in self.rows.values()
            if (start is None or r.occurred_at >= start) and (end is None or r.occurred_at < end)
        ]
        responses = [r for r in rows if r.event_type == "ResponseGenerated"]
        latencies = [r.latency_ms for r in responses if r.latency_ms is not None]
        citations = [r.citation_count for r in responses if r.citation_count is not None]
        return Summary(
            queries=sum(r.event_type == "QuerySubmitted" for r in rows),
            answered=sum(r.answered is True for r in responses),
            unanswered=sum(r.answered is False for r in responses),
            failed=sum(r.event_type == "QueryFailed" for r in rows),
            mean_latency_ms=sum(latencies) / len(latencies) if latencies else None,
            mean_citations=sum(citations) / len(citations) if citations else None,
        )

    def ping(self) -> bool:
        return not self.down

    def close(self) -> None:
        pass

    def _check(self) -> None:
        if self.down:
            raise DependencyUnavailable("database")
        if self.broken is not None:
            raise self.broken


class FakeMessage:
    """A broker message that remembers how it was settled."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.settled: list[tuple[str, bool | None]] = []

    async def ack(self) -> None:
        self.settled.append(("ack", None))

    async def nack(self, requeue: bool = True) -> None:
        self.settled.append(("nack", requeue))

    async def reject(self, requeue: bool = False) -> None:
        self.settled.append(("reject", requeue))
