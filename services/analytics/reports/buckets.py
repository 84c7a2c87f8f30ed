"""Time buckets of a series: aligned on UTC minutes, hours or days."""
from __future__ import annotations

from datetime import datetime, timedelta

from services.analytics.errors import TooManyBuckets

MAX_BUCKETS = 10_000
STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}


def floor(moment: datetime, bucket: str) -> datetime:
    """The start of the bucket holding `moment` (an aware UTC datetime)."""
    moment = moment.replace(second=0, microsecond=0)
    if bucket in ("hour", "day"):
        moment = moment.replace(minute=0)
    if bucket == "day":
        moment = moment.replace(hour=0)
    return moment


def bucket_starts(first: datetime, last: datetime, bucket: str) -> list[datetime]:
    """The start of every bucket from the one holding `first` to the one holding `last`, gaps included;
    raises TooManyBuckets past MAX_BUCKETS."""
    step = STEPS[bucket]
    start = floor(first, bucket)
    count = (floor(last, bucket) - start) // step + 1
    if count > MAX_BUCKETS:
        raise TooManyBuckets(buckets=count, bucket=bucket, limit=MAX_BUCKETS)
    return [start + i * step for i in range(count)]
