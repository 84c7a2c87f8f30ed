"""What a model's tokens cost, at the prices an operator sets in MODEL_PRICES (US dollars)."""
from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

PER = 1_000_000  # prices are quoted per million tokens, as vendors publish them
# Chat's built-in offline generator (services/chat/settings.py OFFLINE_MODEL) runs in Cairn: it costs nothing.
BUILT_IN_MODEL = "cairn-extractive"


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False, description="US dollars per million prompt tokens")
    output: float = Field(ge=0, allow_inf_nan=False, description="US dollars per million completion tokens")


def cost_usd(price: ModelPrice | None, *, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The tokens at `price`; None for a model without one (unknown is not free)."""
    if price is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / PER


def prices_from_text(value: object) -> object:
    """MODEL_PRICES as written: JSON, or nothing (an empty value in .env or a ConfigMap prices no model)."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise ValueError('must be a JSON object, such as {"gpt-4o": {"input": 2.5, "output": 10}}') from None


def with_built_in(prices: dict[str, ModelPrice]) -> dict[str, ModelPrice]:
    """The operator's prices, and the free built-in model unless they price it."""
    return {BUILT_IN_MODEL: ModelPrice(input=0, output=0), **prices}
