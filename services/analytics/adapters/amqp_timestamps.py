"""AMQP timestamps that cannot be read as a date are read as absent.

pamqp, under aio-pika, decodes a timestamp (a message's `timestamp` property, or a header of type T) into a
datetime, and raises when the value lies past the year 9999, as when a publisher writes microseconds instead
of seconds. It raises in the connection's frame reader: the connection drops, the message is delivered again
on the next one and drops that too, and at the queue's delivery limit the broker dead-letters, without a
reason, every message that was in flight beside it. The consumer needs no such timestamp: an event's time
is `occurred_at`, in its body.
"""
from __future__ import annotations

import logging

from pamqp import decode

log = logging.getLogger(__name__)

_TIMESTAMP_BYTES = 8


def read_unreadable_timestamps_as_absent() -> None:
    """Make every AMQP timestamp pamqp cannot turn into a date decode as None, in this whole process."""
    if getattr(decode.timestamp, "tolerant", False):
        return
    if not (isinstance(getattr(decode, "METHODS", None), dict) and isinstance(getattr(decode, "TABLE_MAPPING", None), dict)):
        # Another pamqp layout than the 3.x/4.x this knows: consume as before rather than fail to start.
        log.warning("pamqp's decoder is not the one expected; unreadable AMQP timestamps will drop the connection")
        return
    strict = decode.timestamp

    def tolerant(value: bytes) -> tuple[int, object]:
        try:
            return strict(value)
        except (ValueError, OverflowError, OSError):  # a date datetime cannot hold; the width is fixed
            return _TIMESTAMP_BYTES, None

    tolerant.tolerant = True  # type: ignore[attr-defined]
    decode.timestamp = tolerant
    decode.METHODS["timestamp"] = tolerant
    decode.TABLE_MAPPING[b"T"] = tolerant
