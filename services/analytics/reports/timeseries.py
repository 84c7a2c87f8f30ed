"""The time series: per bucket of submission time (minutes, hours or days of a time zone's clock), the volume,
outcomes, answer rate and latency percentiles."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo

from sqlalchemy import Connection, func, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.domain import ANSWERED, FAILED, NO_ANSWER, PENDING
from services.analytics.models import Bucket, TimePoint, TimeSeriesResponse
from services.analytics.reports.buckets import DEFAULT_ZONE, bucket_index, bucket_starts, time_zone
from services.analytics.reports.percentiles import percentiles, ratio
from services.analytics.reports.scope import Scope

_EARLIEST = datetime.min.replace(tzinfo=UTC)


@dataclass
class _Tally:
    queries: int = 0
    completed: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)

    def point(self, start: datetime) -> TimePoint:
        answered = self.outcomes.get(ANSWERED, 0)
        return TimePoint(
            start=start,
            queries=self.queries,
            answered=answered,
            no_answer=self.outcomes.get(NO_ANSWER, 0),
            failed=self.outcomes.get(FAILED, 0),
            answered_rate=ratio(answered, self.completed),
            latency_ms=percentiles(self.latencies),
        )


def timeseries(conn: Connection, *, scope: Scope, bucket: Bucket, tz: str = DEFAULT_ZONE) -> TimeSeriesResponse:
    zone = time_zone(tz)
    starts = _bucket_starts(conn, scope=scope, bucket=bucket, zone=zone)
    tallies = [_Tally() for _ in starts]
    if starts:
        stmt = (
            select(requests.c.submitted_at, requests.c.outcome, requests.c.latency_ms)
            .where(*scope.conditions())
            .order_by(requests.c.submitted_at)
            .execution_options(yield_per=1000)
        )
        for submitted_at, outcome, latency in conn.execute(stmt):
            tally = tallies[bucket_index(starts, submitted_at)]
            tally.queries += 1
            if outcome != PENDING:
                tally.completed += 1
                tally.outcomes[outcome] = tally.outcomes.get(outcome, 0) + 1
                if latency is not None:
                    tally.latencies.append(latency)
    points = [tally.point(start.astimezone(zone)) for start, tally in zip(starts, tallies)]
    return TimeSeriesResponse(**scope.echo(), bucket=bucket, tz=tz, points=points)


def _bucket_starts(conn: Connection, *, scope: Scope, bucket: Bucket, zone: tzinfo) -> list[datetime]:
    """From the bucket of `from` (else of the first request) to that of the instant before `to` (else of
    the last request); none when the range is empty."""
    first = scope.start
    last = scope.end - timedelta(microseconds=1) if scope.end is not None and scope.end > _EARLIEST else None
    if scope.end is not None and last is None:
        return []
    if first is None or last is None:
        earliest, latest = conn.execute(
            select(func.min(requests.c.submitted_at), func.max(requests.c.submitted_at)).where(*scope.conditions())
        ).one()
        first, last = first or earliest, last or latest
    if first is None or last is None or last < first:
        return []
    return bucket_starts(first, last, bucket, zone)
