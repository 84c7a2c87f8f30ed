"""with_keepalive: beats only in silence, never loses or reorders an item, and leaving early reaches the
source the way leaving a plain iteration would."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from shared.sse import with_keepalive

BEAT = ":"


async def paced(pauses: list[float], log: list[str] | None = None) -> AsyncIterator[str]:
    """Item n after pauses[n] seconds; `log` records how the iteration ended."""
    try:
        for n, pause in enumerate(pauses):
            await asyncio.sleep(pause)
            yield f"item{n}"
        if log is not None:
            log.append("finished")
    except asyncio.CancelledError:
        if log is not None:
            log.append("cancelled")
        raise
    except GeneratorExit:
        if log is not None:
            log.append("closed")
        raise


async def collect(items: AsyncIterator[str]) -> list[str]:
    return [item async for item in items]


async def test_items_that_come_quickly_pass_unchanged_with_no_beat():
    assert await collect(with_keepalive(paced([0, 0, 0.01]), every_s=0.5, comment=BEAT)) == ["item0", "item1", "item2"]


async def test_silence_is_filled_with_one_beat_per_interval_and_the_late_item_still_arrives():
    got = await collect(with_keepalive(paced([0, 0.35, 0]), every_s=0.1, comment=BEAT))
    assert got[0] == "item0" and got[-2:] == ["item1", "item2"]
    assert 2 <= got.count(BEAT) <= 4 and set(got[1:-2]) == {BEAT}


async def test_bytes_streams_beat_with_bytes():
    async def late() -> AsyncIterator[bytes]:
        await asyncio.sleep(0.25)
        yield b"event: done\n\n"

    got = [item async for item in with_keepalive(late(), every_s=0.1, comment=b": keep-alive\n\n")]
    assert got[-1] == b"event: done\n\n" and set(got[:-1]) == {b": keep-alive\n\n"} and got[:-1]


async def test_an_error_of_the_source_reaches_the_reader_after_what_came_before():
    async def failing() -> AsyncIterator[str]:
        yield "item0"
        await asyncio.sleep(0.15)
        raise RuntimeError("the model broke off")

    got: list[str] = []
    with pytest.raises(RuntimeError, match="broke off"):
        async for item in with_keepalive(failing(), every_s=0.1, comment=BEAT):
            got.append(item)
    assert got == ["item0", BEAT]


async def test_a_reader_cancelled_while_waiting_cancels_the_wait_inside_the_source():
    log: list[str] = []

    async def read() -> None:
        async for _ in with_keepalive(paced([0, 10], log), every_s=0.05, comment=BEAT):
            pass

    reader = asyncio.create_task(read())
    await asyncio.sleep(0.2)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert log == ["cancelled"]


async def test_a_reader_that_stops_reading_closes_the_source():
    log: list[str] = []
    stream = with_keepalive(paced([0, 0, 0], log), every_s=1, comment=BEAT)
    assert await anext(stream) == "item0"
    await stream.aclose()
    assert log == ["closed"]


def test_the_interval_must_be_positive():
    with pytest.raises(ValueError, match="every_s"):
        asyncio.run(anext(with_keepalive(paced([0]), every_s=0, comment=BEAT)))
