"""A chat turn as Server-Sent Events: `sources`, then `token` deltas, then `done` — or `error`.

Everything up to generation runs before the first event, so a bad request or a dependency that is
down still gets its plain HTTP error (404, 422, 503). Once the stream has begun, a failure becomes an
`error` event carrying the same JSON body the plain endpoint would return, with its `status` and
`retry_after`. The tokens are the model's
raw text (markers as the prompt numbered the passages) with its images turned to their alt text; `done`
carries the post-processed response, whose answer replaces them.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from services.chat import metrics
from services.chat.errors import LLMContextExceeded, LLMUnavailable
from services.chat.markdown_images import ImageFilter
from services.chat.models import ChatRequest, StreamSources
from services.chat.pipeline import ChatPipeline
from services.chat.ports import Generation
from services.chat.presentation import passage_out
from services.chat.turn import Turn, elapsed_ms
from shared.caller import Caller
from shared.errors import ServiceError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamEvent:
    event: Literal["sources", "token", "done", "error"]
    data: BaseModel | dict[str, Any]


async def open_stream(pipeline: ChatPipeline, *, request: ChatRequest, caller: Caller) -> AsyncIterator[StreamEvent]:
    """Prepare the turn (raising like `answer` does) and return its events, to be iterated once."""
    turn = pipeline.start(request=request, caller=caller)
    with pipeline.failures_reported(turn):
        await pipeline.prepare(turn)
    return _events(pipeline, turn)


async def _events(pipeline: ChatPipeline, turn: Turn) -> AsyncIterator[StreamEvent]:
    finished = False  # ResponseGenerated is out: a reader leaving now changes nothing
    try:
        yield StreamEvent("sources", StreamSources(sources=[passage_out(n, c) for n, c in enumerate(turn.used, start=1)]))
        generation = None
        streamed = False
        if turn.prompt is not None:
            images = ImageFilter()  # the tokens carry no image a client would fetch, as the answer carries none
            async with aclosing(_generate(pipeline, turn)) as items:
                async for item in items:
                    if isinstance(item, Generation):
                        generation = item
                    else:
                        streamed = True
                        if text := images.feed(item):
                            yield StreamEvent("token", {"text": text})
            if text := images.finish():
                yield StreamEvent("token", {"text": text})
        # Shielded: a reader leaving now has had every token, so the turn is still kept and counted as
        # answered (ResponseGenerated), rather than failed with the turn perhaps stored all the same.
        finishing = asyncio.ensure_future(pipeline.finish(turn, generation))
        try:
            response = await asyncio.shield(finishing)
        except asyncio.CancelledError:
            finishing.add_done_callback(lambda task: _report_if_failed(pipeline, turn, task))
            finished = True  # the finish publishes ResponseGenerated, or its failure is reported then
            raise
        finished = True
        if not streamed:  # small talk and "no information": the answer arrives as one token
            yield StreamEvent("token", {"text": response.answer})
        yield StreamEvent("done", response)
    except ServiceError as exc:
        pipeline.report_failure(turn, exc.code, exc)
        if exc.status_code >= 500:  # as the plain endpoint logs it: the stream's request line says 200
            log.warning("request failed", extra={**exc.log_fields(), "stage": turn.stage})
        metrics.count_stream_failure(exc.code)
        yield StreamEvent("error", exc.event_data())
    except (asyncio.CancelledError, GeneratorExit) as exc:  # the client went away: generation is cancelled
        if not finished:
            pipeline.report_failure(turn, "client_disconnected", exc)
        raise
    except Exception as exc:
        log.exception("chat stream failed", extra={"stage": turn.stage})
        pipeline.report_failure(turn, "internal_error", exc)
        metrics.count_stream_failure("internal_error")
        yield StreamEvent(
            "error", {"error": "internal_error", "message": "the answer could not be completed", "status": 500}
        )


def _report_if_failed(pipeline: ChatPipeline, turn: Turn, finishing: asyncio.Future) -> None:
    if finishing.cancelled():
        pipeline.report_failure(turn, "client_disconnected", asyncio.CancelledError())
    elif (exc := finishing.exception()) is not None:
        pipeline.report_failure(turn, exc.code if isinstance(exc, ServiceError) else "internal_error", exc)


async def _generate(pipeline: ChatPipeline, turn: Turn) -> AsyncIterator[str | Generation]:
    turn.stage = "generation"
    step = time.perf_counter()
    generation = None
    while True:
        started = False
        try:
            # aclosing: leaving early closes the model's HTTP response at once, so the model stops too.
            options = pipeline.generation_options(turn)
            async with aclosing(pipeline.generator.stream(model=turn.model, **options)) as deltas:
                async for item in deltas:
                    started = True
                    if isinstance(item, Generation):
                        generation = item
                    yield item
            break
        except LLMContextExceeded as exc:
            if started:
                raise
            pipeline.cut_prompt(turn, exc)  # the passages of `sources` that the shorter prompt keeps come first
    turn.timings.generation = elapsed_ms(step)
    if generation is None:
        raise LLMUnavailable("the model's stream ended without a final result")
