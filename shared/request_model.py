"""The base of every Cairn request body."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestModel(BaseModel):
    """A request body that refuses a field it does not declare (422: `<field>: unknown field`).

    Ignoring it would turn a misspelt option into one silently not applied: a search sent with "filter"
    for "filters" would come back unfiltered with nothing to say so. The OpenAI-compatible /v1 bodies are
    not request models: OpenAI clients send fields Cairn does not use, and those are ignored."""

    model_config = ConfigDict(extra="forbid")
