"""A limit on the CSV exports streamed at once.

An export holds a database connection for as long as its download lasts, which is as long as the client
takes to read it. Without a limit, a few slow downloads took every connection of the pool, and every
report after them waited for the pool timeout. An export over the limit is refused at once (429).
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from starlette.concurrency import iterate_in_threadpool

from services.analytics.errors import TooManyExports


class Closable(Protocol):
    def close(self) -> None: ...


class ExportSlots:
    # A download of a few hundred thousand rows takes seconds: a shorter wait would mostly be refused again.
    RETRY_AFTER_S = 5

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._in_use = 0  # changed on the event loop only

    @property
    def in_use(self) -> int:
        return self._in_use

    def take(self) -> None:
        """Take a slot, or raise TooManyExports; the caller gives it back with release() or stream()."""
        if self._in_use >= self.limit:
            raise TooManyExports(limit=self.limit, retry_after_s=self.RETRY_AFTER_S)
        self._in_use += 1

    def release(self) -> None:
        self._in_use -= 1

    def stream(self, chunks: Iterator[str], *, holding: Closable) -> ExportStream:
        """The chunks of an export that holds a slot (taken with take()) and `holding`, the rows' connection."""
        return ExportStream(self, chunks, holding)


class ExportStream:
    """The chunks of one export, each made in a worker thread. `close` gives back its connection and slot,
    once: when the chunks end, fail or the client leaves, and again by the response whatever happened, since
    a response whose body never started (the client gone before it) never runs the chunks' own cleanup."""

    def __init__(self, slots: ExportSlots, chunks: Iterator[str], holding: Closable) -> None:
        self._slots = slots
        self._chunks = chunks
        self._holding = holding
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[str]:
        try:
            async for chunk in iterate_in_threadpool(self._chunks):
                yield chunk
        finally:
            await self.close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await asyncio.shield(asyncio.to_thread(self._holding.close))
        finally:
            self._slots.release()
