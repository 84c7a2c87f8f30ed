"""Which requests a report covers: those submitted in [start, end), optionally only one model's."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement

from services.analytics.adapters.schema import request_outcomes as requests


@dataclass(frozen=True, kw_only=True)
class Scope:
    start: datetime | None = None
    end: datetime | None = None
    model: str | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        """WHERE clauses on request_outcomes selecting the requests in scope."""
        clauses = []
        if self.start is not None:
            clauses.append(requests.c.submitted_at >= self.start)
        if self.end is not None:
            clauses.append(requests.c.submitted_at < self.end)
        if self.model is not None:
            clauses.append(requests.c.model == self.model)
        return clauses

    def echo(self) -> dict[str, Any]:
        """The scope as the `from`, `to` and `model` fields of a response."""
        return {"from_": self.start, "to": self.end, "model": self.model}
