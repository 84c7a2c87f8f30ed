"""A Chroma call cancelled just as it completes stays cancelled. On Python 3.11 asyncio.wait_for returned the
result instead, so the keyword sync task ran on after the lifespan cancelled it, and the service's shutdown
waited for it forever (seen in CI: a replica stopped while a silent Chroma came back)."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.retrieval.adapters.chroma_store import ChromaStore

pytestmark = pytest.mark.integration


async def test_a_call_cancelled_as_it_completes_raises_cancelled(tmp_path: Path, unique: str) -> None:
    store = ChromaStore(collection=unique, path=tmp_path / "chroma")
    await store.open()
    loop = asyncio.get_running_loop()
    calling: asyncio.Task[str] | None = None

    def completes_as_it_is_cancelled(collections: object) -> str:
        # Queued before the thread's result: the task is cancelled, then its call completes.
        loop.call_soon_threadsafe(calling.cancel)  # type: ignore[union-attr]
        return "done"

    calling = asyncio.create_task(store._run(completes_as_it_is_cancelled))
    with pytest.raises(asyncio.CancelledError):
        await calling
