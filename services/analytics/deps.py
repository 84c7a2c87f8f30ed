from __future__ import annotations

import re
from datetime import UTC, datetime
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends, Query, Request
from pydantic import AfterValidator, BeforeValidator

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import DocumentLibrary
from services.analytics.export_slots import ExportSlots
from services.analytics.pricing import ModelPrice, with_built_in
from services.analytics.reports.buckets import time_zone
from services.analytics.reports.scope import Scope
from shared.errors import ServiceError


async def _store(request: Request) -> SqlEventStore:
    return request.app.state.store


async def _library(request: Request) -> DocumentLibrary:
    return request.app.state.library


async def _export_slots(request: Request) -> ExportSlots:
    return request.app.state.export_slots


async def _prices(request: Request) -> Mapping[str, ModelPrice]:
    return with_built_in(request.app.state.settings.model_prices)


StoreDep = Annotated[SqlEventStore, Depends(_store)]
ExportSlotsDep = Annotated[ExportSlots, Depends(_export_slots)]
LibraryDep = Annotated[DocumentLibrary, Depends(_library)]
PricesDep = Annotated[Mapping[str, ModelPrice], Depends(_prices)]

_STARTS_WITH_A_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# A date-time whose offset's "+" became a space: a query string reads an unencoded "+" as one, and curl or an
# address bar send it unencoded. No ISO 8601 time ends in a space and an offset, so the sign is certain.
_PLUS_READ_AS_SPACE = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}(?::?\d{2})?)")


def _iso_8601(value: Any) -> Any:
    """ISO 8601 text only: not the Unix timestamps ("1700000000") pydantic would also read as datetimes."""
    if isinstance(value, str) and not _STARTS_WITH_A_DATE.match(value):
        raise ValueError("must be an ISO 8601 date-time, e.g. 2025-03-01T12:00:00Z")
    if isinstance(value, str) and (plus_lost := _PLUS_READ_AS_SPACE.fullmatch(value)):
        return f"{plus_lost[1]}+{plus_lost[2]}"
    return value


def _utc(value: datetime) -> datetime:
    """Aware UTC; a time without an offset is taken as UTC. A bound past the range Python can
    represent in UTC (year 1 with a positive offset, say) is clamped: no event lies beyond it."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        return (datetime.min if value.year == datetime.min.year else datetime.max).replace(tzinfo=UTC)


UtcDateTime = Annotated[datetime, BeforeValidator(_iso_8601), AfterValidator(_utc)]
_FROM = Query(alias="from", description="ISO 8601, inclusive; a time without an offset is UTC")
_TO = Query(alias="to", description="ISO 8601, exclusive; a time without an offset is UTC")


class TimeRange:
    """The `from` / `to` query parameters, as aware UTC datetimes."""

    def __init__(
        self,
        start: Annotated[UtcDateTime | None, _FROM] = None,
        end: Annotated[UtcDateTime | None, _TO] = None,
    ) -> None:
        self.start, self.end = start, end
        if start and end and start > end:
            raise ServiceError("from: must not be after to", code="invalid_request", status_code=422)


RangeDep = Annotated[TimeRange, Depends()]


ModelQuery = Annotated[
    str | None,
    Query(
        min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$",  # PostgreSQL cannot even compare with U+0000
        description="Only requests answered by (or asked of) this model; unknown: those that name no model",
    ),
]


def _scope(time_range: RangeDep, model: ModelQuery = None) -> Scope:
    return Scope(start=time_range.start, end=time_range.end, model=model)


ScopeDep = Annotated[Scope, Depends(_scope)]
LimitQuery = Annotated[int, Query(ge=1, le=1000, description="At most this many items per list")]


def _known_zone(name: str) -> str:
    time_zone(name)
    return name


TimeZoneQuery = Annotated[
    str,
    Query(
        max_length=64,
        description="IANA time zone whose clock the buckets follow, e.g. America/New_York or Asia/Kolkata",
    ),
    AfterValidator(_known_zone),
]

