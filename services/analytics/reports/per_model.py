"""Figures per model: requests, share, latency percentiles, tokens and their cost."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from sqlalchemy import BigInteger, Connection, case, cast, desc, func, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.domain import PENDING, RESPONSE_OUTCOMES
from services.analytics.models import ModelFigures, ModelsResponse, Tokens
from services.analytics.pricing import ModelPrice, cost_usd
from services.analytics.reports.percentiles import percentiles, ratio
from services.analytics.reports.ordering import by_code_point
from services.analytics.reports.scope import Scope, model_name


def models(
    conn: Connection, *, scope: Scope, limit: int, prices: Mapping[str, ModelPrice] | None = None
) -> ModelsResponse:
    """Requests with an outcome, by the model that answered them (else the one they asked for, else `unknown`);
    the cost of a model's tokens at its price in `prices`."""
    prices = prices or {}
    model = model_name  # the name the model filter compares with (reports/scope.py)
    done = [*scope.conditions(), requests.c.outcome != PENDING]
    count = func.count()
    responses = func.count(case((requests.c.outcome.in_(RESPONSE_OUTCOMES), 1)))
    every_model = (
        select(
            model.label("model"),
            count.label("requests"),
            responses.label("responses"),
            # Every model's requests in the range, counted before the model filter and the LIMIT: the share's
            # denominator, without a query of its own (each query over the view joins the whole events table
            # again).
            cast(func.sum(count).over(), BigInteger).label("all_requests"),
            *(func.coalesce(func.sum(getattr(requests.c, f"{part}_tokens")), 0).label(part)
              for part in ("prompt", "completion", "total")),
        )
        .where(*replace(scope, model=None).conditions(), requests.c.outcome != PENDING)
        .group_by(model)
        .subquery()
    )
    chosen = [every_model.c.model == scope.model] if scope.model is not None else []
    totals = conn.execute(
        select(every_model)
        .where(*chosen)
        .order_by(desc(every_model.c.requests), by_code_point(every_model.c.model))
        .limit(limit)
    ).all()
    latencies: dict[str, list[float]] = defaultdict(list)
    stmt = select(model, requests.c.latency_ms).where(*done, requests.c.latency_ms.is_not(None))
    for name, latency in conn.execute(stmt.order_by(model, requests.c.latency_ms)):
        latencies[name].append(latency)
    items = [
        ModelFigures(
            model=row.model,
            requests=row.requests,
            share=row.requests / row.all_requests,
            latency_ms=percentiles(latencies[row.model]),
            tokens=Tokens(prompt=row.prompt, completion=row.completion, total=row.total),
            mean_total_tokens=ratio(row.total, row.responses),
            cost_usd=cost_usd(prices.get(row.model), prompt_tokens=row.prompt, completion_tokens=row.completion),
        )
        for row in totals
    ]
    return ModelsResponse(**scope.echo(), items=items)
