"""Which models chat offers, as the OpenAI-compatible face needs to know: fetched from chat's
GET /models and kept briefly, so a completion costs no extra call most of the time."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

CAIRN_MODEL = "cairn"


@dataclass(frozen=True)
class ModelOffer:
    """The models chat offers: its default, and those a request may name."""

    default: str
    models: tuple[str, ...]

    def pick(self, requested: str | None) -> str | None:
        """The model_id to send chat for a requested name: None (chat's default) unless chat offers it."""
        return requested if requested != CAIRN_MODEL and requested in self.models else None

    def used(self, requested: str | None) -> str:
        return self.pick(requested) or self.default


class OfferedModels:
    """Chat's model offer, fetched at most once every `ttl_s` seconds."""

    def __init__(self, *, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be positive; got {ttl_s}")
        self.ttl_s = ttl_s
        self._clock = clock
        self._offer: ModelOffer | None = None
        self._fetched_at = 0.0
        self._lock = asyncio.Lock()

    async def get(self, fetch: Callable[[], Awaitable[ModelOffer]]) -> ModelOffer:
        async with self._lock:
            if self._offer is None or self._clock() - self._fetched_at >= self.ttl_s:
                self._offer = await fetch()
                self._fetched_at = self._clock()
            return self._offer
