"""Micro-batching: concurrent single-item requests share one batched call.

- Items submitted while a batch runs wait for it and then go together (up to `max_batch`): under load,
  batches form by themselves, whatever the encode time.
- An item reaching an idle batcher goes on the next event-loop turn, with everything submitted in the
  same turn. It waits up to `window_s` for company only if requests have recently overlapped (within
  BURST_MEMORY_S), so a lone client never pays the window and concurrent clients share encodes.
"""
from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from services.retrieval import metrics

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

BURST_MEMORY_S = 1.0


class MicroBatcher(Generic[K, V]):
    """`await submit(item)` returns `run_batch(items)[i]` for that item.

    `run_batch` gets distinct items (duplicates in one batch are computed once) and must return one
    result per item, in order. At most one batch runs at a time. If it raises, every caller waiting on
    that batch gets the exception. Use from one event loop at a time. `name` labels its batch sizes in
    `cairn_retrieval_batch_size` (default: the name of `run_batch`).
    """

    def __init__(
        self, run_batch: Callable[[list[K]], Awaitable[list[V]]], *, window_s: float, max_batch: int, name: str = ""
    ) -> None:
        if window_s < 0:
            raise ValueError("window_s must be >= 0")
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._run_batch = run_batch
        self.name = name or getattr(run_batch, "__name__", "batch").strip("_")
        self._window_s = window_s
        self._max_batch = max_batch
        self._pending: dict[K, list[asyncio.Future[V]]] = {}
        # The context (request id, trace) of the first request to ask for each pending item: a batch runs in
        # that of its first item, not in that of whichever batch or request happened to start it.
        self._contexts: dict[K, contextvars.Context] = {}
        self._timer: asyncio.Handle | None = None
        self._running: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._overlap_at = float("-inf")  # loop time an item last arrived while others were pending or running
        self.batch_sizes: list[int] = []  # of every batch run, for tests and the bench; cleared by the caller

    async def submit(self, item: K) -> V:
        future = self._enqueue(item)
        self._wake()
        return await future

    async def submit_many(self, items: list[K]) -> list[V]:
        """Every item's result, in order; the items may be split over several batches."""
        futures = [self._enqueue(item) for item in items]
        self._wake()
        # return_exceptions: one failed batch fails many futures; each must be retrieved, not just the first.
        results = await asyncio.gather(*futures, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(results)

    def _enqueue(self, item: K) -> asyncio.Future[V]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new event loop (a restarted app, another test): what the old one left behind died with it.
            self._loop, self._pending, self._contexts, self._timer, self._running = loop, {}, {}, None, None
            self._overlap_at = float("-inf")
        if self._pending or self._running is not None:
            self._overlap_at = loop.time()
        future: asyncio.Future[V] = loop.create_future()
        self._pending.setdefault(item, []).append(future)
        if item not in self._contexts:
            self._contexts[item] = contextvars.copy_context()
        return future

    def _wake(self) -> None:
        if self._running is not None or not self._pending:
            return  # the running batch starts the next one when it ends
        loop = asyncio.get_running_loop()
        if len(self._pending) >= self._max_batch:
            self._start(loop)
        elif self._timer is None:
            if self._window_s > 0 and loop.time() - self._overlap_at < BURST_MEMORY_S:
                self._timer = loop.call_later(self._window_s, self._start, loop)
            else:
                self._timer = loop.call_soon(self._start, loop)

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None or not self._pending:
            return
        items = list(self._pending)[: self._max_batch]
        context = self._contexts[items[0]]  # the oldest waiting request's
        batch = {}
        for item in items:
            batch[item] = self._pending.pop(item)
            del self._contexts[item]
        self._running = loop.create_task(self._run(batch, loop), context=context)

    async def _run(self, batch: dict[K, list[asyncio.Future[V]]], loop: asyncio.AbstractEventLoop) -> None:
        items = list(batch)
        self.batch_sizes.append(len(items))
        metrics.batch_ran(self.name, len(items))
        try:
            results = await self._run_batch(items)
            if len(results) != len(items):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(items)} items")
        except asyncio.CancelledError:
            for futures in batch.values():
                for future in futures:
                    future.cancel()
            self._running = None
            raise
        except Exception as exc:
            for futures in batch.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
        else:
            for item, result in zip(items, results):
                for future in batch[item]:
                    if not future.done():  # a caller that gave up (cancelled) is skipped
                        future.set_result(result)
        self._running = None
        # Whatever queued up meanwhile has already waited at least one batch: go at once.
        if self._pending:
            self._start(loop)
