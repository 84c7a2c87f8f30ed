"""The micro-batcher: concurrent callers share one batched call, each gets its own result or the error."""
from __future__ import annotations

import asyncio

import pytest

from services.retrieval.microbatch import MicroBatcher
from shared.context import request_id_var

pytestmark = pytest.mark.unit


class RecordingRun:
    """A batched function that records every batch; `gate` holds a batch until the test opens it."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on
        self.gate: asyncio.Event | None = None

    async def __call__(self, items: list[str]) -> list[str]:
        self.batches.append(list(items))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_on in items:
            raise RuntimeError(f"cannot encode {self.fail_on}")
        return [item.upper() for item in items]


async def test_concurrent_callers_within_the_window_share_one_call() -> None:
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=0.05, max_batch=32)
    words = [f"w{i}" for i in range(10)]
    results = await asyncio.gather(*(batcher.submit(w) for w in words))
    assert results == [w.upper() for w in words], "each caller gets the result of its own item"
    assert run.batches == [words]
    assert batcher.batch_sizes == [10]


async def test_a_lone_request_to_a_quiet_batcher_does_not_wait_for_the_window() -> None:
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=60.0, max_batch=32)  # waiting for the window would time the test out
    assert await asyncio.wait_for(batcher.submit("alone"), timeout=5) == "ALONE"
    assert await asyncio.wait_for(batcher.submit("later"), timeout=5) == "LATER"
    assert run.batches == [["alone"], ["later"]]


async def overlap(batcher: MicroBatcher) -> None:
    """Two requests at once: the batcher now knows clients are concurrent."""
    await asyncio.gather(batcher.submit("first"), batcher.submit("second"))


async def test_after_concurrent_requests_a_new_one_waits_for_company() -> None:
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=0.5, max_batch=32)
    await overlap(batcher)
    x = asyncio.ensure_future(batcher.submit("x"))
    await asyncio.sleep(0.02)  # well inside the window
    y = asyncio.ensure_future(batcher.submit("y"))
    assert await asyncio.gather(x, y) == ["X", "Y"]
    assert run.batches == [["first", "second"], ["x", "y"]]


async def test_max_batch_starts_a_batch_without_waiting_for_the_window() -> None:
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=60.0, max_batch=4)
    await overlap(batcher)
    waiting = []
    for i in range(3):
        waiting.append(asyncio.ensure_future(batcher.submit(f"q{i}")))
        await asyncio.sleep(0.01)
    assert run.batches == [["first", "second"]], "three requests wait for the window"
    waiting.append(asyncio.ensure_future(batcher.submit("q3")))
    assert await asyncio.wait_for(asyncio.gather(*waiting), timeout=5) == ["Q0", "Q1", "Q2", "Q3"]
    assert run.batches[1:] == [["q0", "q1", "q2", "q3"]]


async def test_items_arriving_during_a_batch_go_together_in_the_next() -> None:
    run = RecordingRun()
    run.gate = asyncio.Event()
    batcher = MicroBatcher(run, window_s=0, max_batch=3)
    first = asyncio.ensure_future(batcher.submit("a"))
    await asyncio.sleep(0.01)
    assert run.batches == [["a"]], "an idle batcher starts on the next turn of the loop"
    later = [asyncio.ensure_future(batcher.submit(x)) for x in ("b", "c", "d", "e")]
    await asyncio.sleep(0.01)
    assert run.batches == [["a"]], "only one batch runs at a time"
    run.gate.set()
    assert await first == "A"
    assert await asyncio.gather(*later) == ["B", "C", "D", "E"]
    assert run.batches == [["a"], ["b", "c", "d"], ["e"]], "queued items split by max_batch, in arrival order"


async def test_a_batch_runs_in_the_context_of_a_request_it_serves_not_of_the_batch_before() -> None:
    """What a batch logs (a failed Chroma call, say) carries the request id of one of its own requests: the
    batch that follows a busy one must not go on under the first request of the busy spell, long answered."""
    seen: list[str | None] = []

    async def run(items: list[str]) -> list[str]:
        seen.append(request_id_var.get())
        await gate.wait()
        return items

    gate = asyncio.Event()
    batcher = MicroBatcher(run, window_s=0, max_batch=8)

    async def ask(item: str) -> str:
        request_id_var.set(f"request-{item}")
        return await batcher.submit(item)

    first = asyncio.ensure_future(ask("a"))
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(ask("b"))  # waits for the batch of "a", then goes in one of its own
    await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(first, second) == ["a", "b"]
    assert seen == ["request-a", "request-b"]


async def test_duplicates_in_one_batch_are_computed_once() -> None:
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=0.05, max_batch=32)
    results = await asyncio.gather(batcher.submit("x"), batcher.submit("y"), batcher.submit("x"))
    assert results == ["X", "Y", "X"]
    assert run.batches == [["x", "y"]]


async def test_submit_many_keeps_order_across_batches() -> None:
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=0, max_batch=2)
    texts = ["t1", "t2", "t3", "t4", "t5"]
    assert await batcher.submit_many(texts) == ["T1", "T2", "T3", "T4", "T5"]
    assert run.batches == [["t1", "t2"], ["t3", "t4"], ["t5"]]


async def test_an_error_reaches_every_caller_of_that_batch_and_the_next_batch_still_runs() -> None:
    run = RecordingRun(fail_on="bad")
    batcher = MicroBatcher(run, window_s=0.05, max_batch=32)
    results = await asyncio.gather(batcher.submit("ok"), batcher.submit("bad"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "cannot encode bad" in str(r) for r in results), results
    assert await batcher.submit("fine") == "FINE", "a failed batch does not wedge the batcher"


async def test_submit_many_raises_when_its_batch_fails() -> None:
    batcher = MicroBatcher(RecordingRun(fail_on="bad"), window_s=0, max_batch=8)
    with pytest.raises(RuntimeError, match="cannot encode bad"):
        await batcher.submit_many(["one", "bad", "two"])


async def test_a_wrong_number_of_results_is_an_error_not_a_silent_mismatch() -> None:
    async def short(items: list[str]) -> list[str]:
        return items[:-1]

    batcher = MicroBatcher(short, window_s=0, max_batch=8)
    with pytest.raises(RuntimeError, match="returned 1 results for 2 items"):
        await batcher.submit_many(["a", "b"])


async def test_a_caller_that_gives_up_does_not_disturb_the_others() -> None:
    run = RecordingRun()
    run.gate = asyncio.Event()
    batcher = MicroBatcher(run, window_s=0.01, max_batch=32)
    impatient = asyncio.ensure_future(batcher.submit("gone"))
    patient = asyncio.ensure_future(batcher.submit("stays"))
    await asyncio.sleep(0.05)
    impatient.cancel()
    run.gate.set()
    assert await patient == "STAYS"
    assert impatient.cancelled()


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError):
        MicroBatcher(RecordingRun(), window_s=-1, max_batch=4)
    with pytest.raises(ValueError):
        MicroBatcher(RecordingRun(), window_s=0.01, max_batch=0)


def test_a_batcher_outlives_its_event_loop() -> None:
    """An app restarted on a new loop (or the next test) reuses the embedder: nothing left hanging."""
    run = RecordingRun()
    batcher = MicroBatcher(run, window_s=60.0, max_batch=32)

    async def abandon() -> None:
        await overlap(batcher)
        asyncio.ensure_future(batcher.submit("left behind"))  # waits for the window when the loop ends
        await asyncio.sleep(0.01)

    asyncio.run(abandon())
    assert asyncio.run(asyncio.wait_for(batcher.submit("next loop"), timeout=5)) == "NEXT LOOP"
