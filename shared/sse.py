"""Keep-alive comments for Server-Sent Event streams that may sit idle.

A stream waits silently while the model reads a long prompt (up to chat's LLM_DEADLINE_S, 90 s by
default) before its first token. Proxies and load balancers in front of Cairn close connections idle
for 60 s by default (nginx's proxy_read_timeout, an AWS load balancer's idle timeout), so a slow answer
would be cut off there. A comment line every few seconds of silence keeps such connections open; every
SSE reader (browsers, the web page, the OpenAI SDK, httpx-sse) skips comments.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

T = TypeVar("T", str, bytes)

KEEPALIVE_COMMENT = ": keep-alive\n\n"


async def with_keepalive(items: AsyncIterator[T], *, every_s: float, comment: T) -> AsyncIterator[T]:
    """`items` as they come, with `comment` after each `every_s` seconds in which none came.

    The next item is awaited in a task of its own, so a beat never cancels the wait for it. Leaving
    early (the reader went away) cancels that wait inside `items`, exactly as iterating `items` directly
    would, then closes `items`.
    """
    if every_s <= 0:
        raise ValueError("every_s must be positive")
    pending: asyncio.Task[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(items))
            done, _ = await asyncio.wait({pending}, timeout=every_s)
            if not done:
                yield comment
                continue
            try:
                item = pending.result()
            except StopAsyncIteration:
                return
            finally:
                pending = None
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        aclose = getattr(items, "aclose", None)
        if aclose is not None:
            await aclose()
