from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Query, Request

from services.analytics.domain import EventStore
from shared.errors import ServiceError


async def _store(request: Request) -> EventStore:
    return request.app.state.store


StoreDep = Annotated[EventStore, Depends(_store)]


class TimeRange:
    """The `from` / `to` query parameters, as aware UTC datetimes (a time without offset is taken as UTC)."""

    def __init__(
        self,
        start: Annotated[datetime | None, Query(alias="from", description="ISO 8601, inclusive")] = None,
        end: Annotated[datetime | None, Query(alias="to", description="ISO 8601, exclusive")] = None,
    ) -> None:
        self.start = _utc(start)
        self.end = _utc(end)
        if self.start and self.end and self.start > self.end:
            raise ServiceError("from: must not be after to", code="invalid_request", status_code=422)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


RangeDep = Annotated[TimeRange, Depends()]
