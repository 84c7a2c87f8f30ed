"""Which requests a report covers: those submitted in [start, end), optionally only one model's."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func

from services.analytics.adapters.schema import request_outcomes as requests

UNKNOWN_MODEL = "unknown"
# A request's model as the reports name it: a request whose events name no model is under `unknown`, together
# with any request of a model that calls itself "unknown". The per-model report groups by it and the model
# filter compares with it, so that picking a model the report lists selects exactly the requests it counted.
model_name = func.coalesce(requests.c.model, UNKNOWN_MODEL)


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
            clauses.append(model_name == self.model)
        return clauses

    def echo(self) -> dict[str, Any]:
        """The scope as the `from`, `to` and `model` fields of a response."""
        return {"from_": self.start, "to": self.end, "model": self.model}
