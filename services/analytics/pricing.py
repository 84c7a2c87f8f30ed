"""What a model's tokens cost, at the prices an operator sets in MODEL_PRICES (US dollars)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PER = 1_000_000  # prices are quoted per million tokens, as vendors publish them


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0, allow_inf_nan=False, description="US dollars per million prompt tokens")
    output: float = Field(ge=0, allow_inf_nan=False, description="US dollars per million completion tokens")


def cost_usd(price: ModelPrice | None, *, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The tokens at `price`; None for a model without one (unknown is not free)."""
    if price is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / PER
