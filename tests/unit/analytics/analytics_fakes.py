"""Hand-written doubles for the analytics unit tests."""
from __future__ import annotations

from services.analytics.domain import EventRecord
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

    def ping(self) -> bool:
        return not self.down

    def close(self) -> None:
        pass

    def _check(self) -> None:
        if self.down:
            raise DependencyUnavailable("database")
        if self.broken is not None:
            raise self.broken


class FakeLibrary:
    """DocumentLibrary with a fixed list of documents."""

    def __init__(self, doc_ids: list[str]) -> None:
        self.doc_ids = doc_ids

    async def document_ids(self) -> list[str]:
        return list(self.doc_ids)


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
