"""The per-request view as CSV, one row per request in scope, oldest first."""
from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from sqlalchemy import Select, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.reports.ordering import by_code_point
from services.analytics.reports.scope import Scope

COLUMNS = (
    "request_id", "submitted_at", "user_id", "session_id", "trace_id", "conversation_id", "query", "model",
    "outcome", "completed_at", "latency_ms", "confidence_level", "confidence_score", "citation_count",
    "supported_citations", "grounding_score", "prompt_tokens", "completion_tokens", "total_tokens",
    "failure_stage", "failure_error", "rating", "comment", "rated_at",
)
# A spreadsheet runs a cell that starts like a formula. Every text cell is defused: besides what users typed
# (query, comment) and what an LLM endpoint reported (model), a caller chooses its X-Request-ID and
# conversation_id ("-1-1" would show as -2).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def statement(scope: Scope) -> Select:
    columns = [requests.c[name] for name in COLUMNS]
    order = (requests.c.submitted_at, by_code_point(requests.c.request_id))
    return select(*columns).where(*scope.conditions()).order_by(*order)


def csv_chunks(rows: Iterable[Any], *, rows_per_chunk: int = 500) -> Iterator[str]:
    """The header line, then the rows, a few hundred per chunk."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    pending = 0
    for row in rows:
        writer.writerow([_cell(name, value) for name, value in zip(COLUMNS, row)])
        pending += 1
        if pending == rows_per_chunk:
            yield _drain(buffer)
            pending = 0
    yield _drain(buffer)


def _cell(name: str, value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value


def _drain(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text
