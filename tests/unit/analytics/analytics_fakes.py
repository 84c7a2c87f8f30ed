"""Hand-written doubles for the analytics unit tests."""
from __future__ import annotations

from collections.abc import Sequence

from services.analytics.domain import EventRecord
from shared.errors import DependencyUnavailable


class FakeEventStore:
    """EventStore in memory. Set `down` to act as an unreachable database, `broken` to raise anything else,
    `unstorable` to event ids that make any call storing them raise. `batches` holds the size of each call
    that reached the store; `journal`, shared with a FakeChannel, the order of commits and acks."""

    def __init__(self) -> None:
        self.rows: dict[str, EventRecord] = {}
        self.down = False
        self.broken: Exception | None = None
        self.unstorable: set[str] = set()
        self.batches: list[int] = []
        self.journal: list[tuple] = []

    @property
    def add_calls(self) -> int:
        return len(self.batches)

    def add(self, record: EventRecord) -> bool:
        return self.add_many([record])[0]

    def add_many(self, records: Sequence[EventRecord]) -> list[bool]:
        self.batches.append(len(records))
        self._check()
        if refused := self.unstorable & {str(record.event_id) for record in records}:
            raise RuntimeError(f"cannot store {sorted(refused)}")
        new = []
        for record in records:  # all or nothing: nothing above raises once rows change
            new.append(str(record.event_id) not in self.rows)
            self.rows.setdefault(str(record.event_id), record)
        self.journal.append(("commit", len(records)))
        return new

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

    async def readiness(self) -> dict[str, bool]:
        return {}


class FakeDeadLetters:
    """Records what would be dead-lettered; set `broken` to act as a publish the broker did not confirm."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, str]] = []
        self.broken: Exception | None = None

    async def send(self, message, *, reason: str) -> None:
        if self.broken is not None:
            raise self.broken
        self.sent.append((message.body, reason))


class FakeChannel:
    """Deliveries on one broker channel: numbered in order, and an `ack(multiple=True)` settles every
    message up to it that is not settled yet, as RabbitMQ does. Each settlement goes in `journal`."""

    def __init__(self, journal: list[tuple] | None = None) -> None:
        self.delivered: list[FakeMessage] = []
        self.journal = journal if journal is not None else []

    def deliver(self, body: bytes, *, earlier_deliveries: int | None = None) -> FakeMessage:
        return FakeMessage(body, channel=self, earlier_deliveries=earlier_deliveries)


class FakeMessage:
    """A broker message that remembers how it was settled. `earlier_deliveries` sets the quorum queue's
    x-delivery-count header. Settling a message twice fails, as it does with aio-pika."""

    def __init__(
        self, body: bytes, *, channel: FakeChannel | None = None, earlier_deliveries: int | None = None
    ) -> None:
        self.body = body
        self.headers = {} if earlier_deliveries is None else {"x-delivery-count": earlier_deliveries}
        self.channel = channel or FakeChannel()
        self.channel.delivered.append(self)
        self.delivery_tag = len(self.channel.delivered)
        self.settled: list[tuple[str, bool | None]] = []

    async def ack(self, multiple: bool = False) -> None:
        if multiple and self.settled:
            raise AssertionError(f"ack(multiple=True) on message {self.delivery_tag}, which is settled already")
        targets = [m for m in self.channel.delivered[:self.delivery_tag] if not m.settled] if multiple else [self]
        for message in targets:
            message._settle("ack", None)

    async def nack(self, requeue: bool = True) -> None:
        self._settle("nack", requeue)

    async def reject(self, requeue: bool = False) -> None:
        self._settle("reject", requeue)

    def _settle(self, how: str, requeue: bool | None) -> None:
        if self.settled:
            raise AssertionError(f"message {self.delivery_tag} settled twice: {self.settled[0]} then {how}")
        self.settled.append((how, requeue))
        self.channel.journal.append((how, self.delivery_tag))
