"""The buckets of the time series follow a time zone's clock: New York across the end (2026-11-01) and the
start (2026-03-08) of daylight saving time, India's half-hour offset, and UTC as before."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from services.analytics.errors import TooManyBuckets
from services.analytics.reports.buckets import MAX_BUCKETS, bucket_index, bucket_starts, time_zone
from shared.errors import ServiceError

pytestmark = pytest.mark.unit

NEW_YORK = ZoneInfo("America/New_York")
KOLKATA = ZoneInfo("Asia/Kolkata")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(starts: list[datetime], zone) -> list[str]:
    """The starts as the response writes them: ISO 8601 with the zone's offset at each instant."""
    return [start.astimezone(zone).isoformat() for start in starts]


def starts_of(start: datetime, end: datetime, bucket: str, zone) -> list[datetime]:
    """The buckets of [start, end), as the time series asks for them."""
    return bucket_starts(start, end - timedelta(microseconds=1), bucket, zone)


def test_the_hour_new_york_turns_back_through_is_two_buckets() -> None:
    starts = starts_of(utc(2026, 11, 1, 4), utc(2026, 11, 1, 8), "hour", NEW_YORK)
    assert local(starts, NEW_YORK) == [
        "2026-11-01T00:00:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",  # 01:00 again, an hour later
        "2026-11-01T02:00:00-05:00",
    ]
    assert starts == [utc(2026, 11, 1, h) for h in (4, 5, 6, 7)]
    assert [bucket_index(starts, utc(2026, 11, 1, 5, 59)), bucket_index(starts, utc(2026, 11, 1, 6))] == [1, 2]


def test_the_hour_new_york_skips_has_no_bucket() -> None:
    starts = starts_of(utc(2026, 3, 8, 5), utc(2026, 3, 8, 8), "hour", NEW_YORK)
    assert local(starts, NEW_YORK) == [
        "2026-03-08T00:00:00-05:00", "2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00",
    ]


def test_new_york_days_start_at_its_midnight_and_last_23_or_25_hours() -> None:
    starts = starts_of(utc(2026, 10, 31, 4), utc(2026, 11, 3, 5), "day", NEW_YORK)
    assert local(starts, NEW_YORK) == [
        "2026-10-31T00:00:00-04:00", "2026-11-01T00:00:00-04:00", "2026-11-02T00:00:00-05:00",
    ]
    assert [b - a for a, b in zip(starts, starts[1:])] == [timedelta(hours=24), timedelta(hours=25)]
    spring = starts_of(utc(2026, 3, 7, 5), utc(2026, 3, 9, 4), "day", NEW_YORK)
    assert local(spring, NEW_YORK) == ["2026-03-07T00:00:00-05:00", "2026-03-08T00:00:00-05:00"]
    assert spring[1] - spring[0] == timedelta(hours=24)
    # The evening of 31 October in New York is 1 November in UTC: it counts in New York's 31 October.
    assert bucket_index(starts, utc(2026, 11, 1, 2)) == 0


def test_new_york_minutes_run_through_the_repeated_hour_in_order() -> None:
    starts = starts_of(utc(2026, 11, 1, 5, 58), utc(2026, 11, 1, 6, 2), "minute", NEW_YORK)
    assert local(starts, NEW_YORK) == [
        "2026-11-01T01:58:00-04:00", "2026-11-01T01:59:00-04:00",
        "2026-11-01T01:00:00-05:00", "2026-11-01T01:01:00-05:00",
    ]


def test_a_series_starting_in_the_repeated_hour_starts_with_its_own_bucket() -> None:
    starts = starts_of(utc(2026, 11, 1, 6, 30), utc(2026, 11, 1, 7, 30), "hour", NEW_YORK)
    assert local(starts, NEW_YORK) == ["2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"]


def test_kolkata_hours_start_at_its_full_hours_and_days_at_its_midnight() -> None:
    hours = starts_of(utc(2026, 1, 1, 0), utc(2026, 1, 1, 2), "hour", KOLKATA)
    assert local(hours, KOLKATA) == [
        "2026-01-01T05:00:00+05:30", "2026-01-01T06:00:00+05:30", "2026-01-01T07:00:00+05:30",
    ]
    assert hours[0] == utc(2025, 12, 31, 23, 30)
    days = starts_of(utc(2026, 1, 1, 0), utc(2026, 1, 2, 0), "day", KOLKATA)
    assert local(days, KOLKATA) == ["2026-01-01T00:00:00+05:30", "2026-01-02T00:00:00+05:30"]


@pytest.mark.parametrize("bucket", ["minute", "hour", "day"])
def test_utc_buckets_are_as_before(bucket: str) -> None:
    start, end = utc(2026, 11, 1, 3, 7, 30), utc(2026, 11, 3, 4, 0, 0)  # New York's change lies inside
    width = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}[bucket]
    first = start.replace(second=0) if bucket == "minute" else start.replace(minute=0, second=0)
    first = first.replace(hour=0) if bucket == "day" else first
    expected = [first + i * width for i in range((end - timedelta(microseconds=1) - first) // width + 1)]
    assert starts_of(start, end, bucket, UTC) == expected
    assert starts_of(start, end, bucket, time_zone("UTC")) == expected


def test_the_limit_counts_the_days_of_the_zone() -> None:
    start = utc(2000, 1, 1)
    end = start + timedelta(days=MAX_BUCKETS)
    assert len(starts_of(start, end, "day", UTC)) == MAX_BUCKETS
    # The same instants touch one day more of New York's calendar: they start on its 31 December 1999.
    with pytest.raises(TooManyBuckets) as info:
        starts_of(start, end, "day", NEW_YORK)
    assert "10,001 day buckets" in info.value.message
    midnights = datetime(2000, 1, 1, tzinfo=NEW_YORK), datetime(2027, 5, 19, tzinfo=NEW_YORK)
    assert len(starts_of(*midnights, "day", NEW_YORK)) == MAX_BUCKETS


def test_a_range_past_the_year_9999_of_the_zone_is_refused() -> None:
    with pytest.raises(ServiceError) as info:
        starts_of(utc(9999, 12, 31, 20), datetime.max.replace(tzinfo=UTC), "hour", KOLKATA)
    assert (info.value.status_code, info.value.code) == (422, "invalid_request")
    assert starts_of(utc(9999, 12, 31, 20), datetime.max.replace(tzinfo=UTC), "hour", UTC)[-1] == utc(9999, 12, 31, 23)


@pytest.mark.parametrize("name", ["America/New_York", "Asia/Kolkata", "Asia/Calcutta", "Etc/UTC", "US/Eastern"])
def test_iana_names_are_zones(name: str) -> None:
    assert time_zone(name).utcoffset(datetime(2026, 1, 1)) == ZoneInfo(name).utcoffset(datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "name", ["", "Mars/Olympus_Mons", "utc", "America", "America/New_York/", "../etc/passwd", "/etc/localtime",
             "localtime", "posixrules", "right/UTC", "a\x00b", " UTC"],
)
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="IANA time zone name"):
        time_zone(name)
