"""The range of occurred_at that publishers send and consumers accept."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest

from shared.events import occurred_at_in_range

pytestmark = pytest.mark.unit

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("occurred_at", "accepted"),
    [
        ("2000-01-01T00:00:00Z", True),  # the first instant accepted
        ("1999-12-31T23:59:59Z", False),
        ("2000-01-01T00:30:00+01:00", False),  # 1999 in UTC
        ("2019-06-01T00:00:00Z", True),  # years late is still accepted: an outbox or a replay may be that slow
        ("2026-06-02T12:00:00Z", True),  # a day ahead: a skewed clock, a local time sent as UTC
        ("2026-06-02T12:00:01Z", False),
        ("2026-06-01T12:00:00", True),  # no offset: read as UTC
        ("1970-01-01T00:00:00Z", False),  # a clock reset to the epoch
        ("0001-01-01T03:00:00+05:00", False),  # before year 1 in UTC: cannot even be converted
        ("9999-12-31T23:00:00-05:00", False),  # after 9999 in UTC: the same
    ],
)
def test_occurred_at_is_accepted_from_2000_to_a_day_ahead(occurred_at: str, accepted: bool) -> None:
    assert occurred_at_in_range(datetime.fromisoformat(occurred_at), now=NOW) is accepted
