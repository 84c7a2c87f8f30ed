"""Time buckets of a series: the minutes, hours or days of a time zone's clock (UTC by default).

A bucket starts where the zone's clock shows a new minute, hour or day, so around a daylight saving change a
day lasts 23 or 25 hours, and the hour the clock is turned back through is two hour buckets, one per offset.
Starts are handled as UTC instants: two aware datetimes of one zone compare by wall time, ignoring the offset.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from services.analytics.errors import TooManyBuckets
from shared.errors import ServiceError

MAX_BUCKETS = 10_000
STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
DEFAULT_ZONE = "UTC"


@cache
def _zone_names() -> frozenset[str]:
    # "localtime" is where the database points at the server's own setting, not the name of a zone.
    return frozenset(available_timezones() - {"localtime"} | {DEFAULT_ZONE})


def time_zone(name: str) -> tzinfo:
    """The zone of an IANA name such as America/New_York; ValueError for a name the zone database lacks.
    UTC needs no database."""
    if name == DEFAULT_ZONE:
        return UTC
    if name not in _zone_names():
        raise ValueError("must be an IANA time zone name, such as UTC or America/New_York")
    return ZoneInfo(name)


def bucket_starts(first: datetime, last: datetime, bucket: str, zone: tzinfo = UTC) -> list[datetime]:
    """The start of every bucket of `zone` from the one holding `first` to the one holding `last`, gaps
    included, as UTC instants in order; raises TooManyBuckets past MAX_BUCKETS."""
    rough = _utc_count(first, last, bucket)  # exact in UTC; in another zone off by no more than its offset changes
    if rough > 2 * MAX_BUCKETS:
        raise TooManyBuckets(buckets=rough, bucket=bucket, limit=MAX_BUCKETS)
    try:
        starts = sorted(set(_boundaries(first, last, bucket, zone)))
    except OverflowError:
        raise ServiceError(
            f"from/to: the range reaches beyond the years 1 to 9999 in {zone}", code="invalid_request", status_code=422
        ) from None
    starts = starts[bucket_index(starts, first) : bisect_right(starts, last)]
    if len(starts) > MAX_BUCKETS:
        raise TooManyBuckets(buckets=len(starts), bucket=bucket, limit=MAX_BUCKETS)
    return starts


def bucket_index(starts: list[datetime], moment: datetime) -> int:
    """The bucket holding `moment`: the last that starts at or before it (the first for an earlier moment,
    which only a clock jumping over a bucket's start can bring)."""
    return max(bisect_right(starts, moment) - 1, 0)


def _utc_count(first: datetime, last: datetime, bucket: str) -> int:
    return (_cut(last.astimezone(UTC), bucket) - _cut(first.astimezone(UTC), bucket)) // STEPS[bucket] + 1


def _boundaries(first: datetime, last: datetime, bucket: str, zone: tzinfo) -> Iterator[datetime]:
    """The instants at which the zone's clock shows the start of a bucket, over every reading the clock
    shows from `first` to `last` (and a few around them: the caller keeps those from the bucket of `first`)."""
    # In the hour the clock is turned back through, it shows again after `first` readings earlier than its
    # own, and showed before `last` readings later than its own: read both ends in the other pass too.
    reading = _cut(min(_clock(first, zone), _reading(first, zone, fold=1)), bucket)
    end = _cut(max(_clock(last, zone), _reading(last, zone, fold=0)), bucket)
    yield from _instants(reading, zone, bucket)
    while reading < end:  # a step past the end could leave the years datetime holds
        reading += STEPS[bucket]
        yield from _instants(reading, zone, bucket)


def _instants(reading: datetime, zone: tzinfo, bucket: str) -> list[datetime]:
    """The instants at which a bucket starts with the zone's clock showing `reading`: each time the clock shows
    it, so twice for a minute or hour it is turned back through; once for a day, whose date does not begin
    again when midnight comes twice (Havana turns 01:00 back to 00:00). A reading the clock jumps over resolves
    past the jump (PEP 495): to the jump itself when the skipped span starts there, else to a later reading
    that starts a bucket anyway."""
    instants = sorted({reading.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1)})
    shown = [instant for instant in instants if _clock(instant, zone) == reading]
    if not shown:
        return [reading.replace(tzinfo=zone, fold=0).astimezone(UTC)]
    return shown[:1] if bucket == "day" else shown


def _clock(moment: datetime, zone: tzinfo) -> datetime:
    """What the zone's clock shows at `moment`, as a naive datetime."""
    return moment.astimezone(zone).replace(tzinfo=None)


def _reading(moment: datetime, zone: tzinfo, *, fold: int) -> datetime:
    """What the zone's clock shows at `moment` with the offset of the given pass (PEP 495's fold) of the hour
    it is turned back through; outside such an hour, what it shows."""
    offset = moment.astimezone(zone).replace(fold=fold).utcoffset()
    return moment.astimezone(UTC).replace(tzinfo=None) + offset


def _cut(reading: datetime, bucket: str) -> datetime:
    """A clock reading cut to the start of its minute, hour or day."""
    reading = reading.replace(second=0, microsecond=0)
    if bucket in ("hour", "day"):
        reading = reading.replace(minute=0)
    if bucket == "day":
        reading = reading.replace(hour=0)
    return reading
