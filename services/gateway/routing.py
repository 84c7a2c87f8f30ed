"""The route class of the gateway's routers that ask chat questions."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from services.gateway.adapters.upstream import ConnectionLost, NotDelivered
from services.gateway.asking import AdmittedQuestion, is_refusal, withdraw_question
from services.gateway.interruptions import publish_interrupted
from shared.errors import ServiceError
from shared.json_body import StrictJsonRoute


def status_of(exc: Exception) -> int:
    """The status the app's exception handlers answer `exc` with."""
    if isinstance(exc, RequestValidationError):
        return 422
    if isinstance(exc, ServiceError | HTTPException):
        return exc.status_code
    return 500


class QuestionRoute(StrictJsonRoute):
    """Withdraws the question AskingSession admitted when the answer refuses it (services.gateway.asking),
    whether the gateway raised the refusal (the body is checked after the dependencies have run) or chat
    answered it, and when it never reached chat (no replica took the connection): sent again with the
    same request id after Retry-After, it is asked, not refused as request_id_taken. A question whose
    connection to chat broke after it reached chat is reported failed in chat's place (interruptions.py)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def withdrawing_handler(request: Request) -> Response:
            try:
                response = await handler(request)
            except Exception as exc:
                if is_refusal(status_of(exc)) or isinstance(exc, NotDelivered):
                    await withdraw(request)
                elif isinstance(exc, ConnectionLost):
                    publish_interrupted(request)
                raise
            if is_refusal(response.status_code):
                await withdraw(request)
            return response

        return withdrawing_handler


async def withdraw(request: Request) -> None:
    """Withdraw the request's admitted question, if it has one (see QuestionRoute)."""
    question: AdmittedQuestion | None = getattr(request.state, "admitted_question", None)
    if question is not None:
        state = request.app.state
        if await withdraw_question(limiter=state.rate_limiter, owners=state.request_owners, question=question):
            request.state.admitted_question = None  # its request id is free: a resend is no 409


async def withdrawing_refusal(chunks: AsyncIterator[bytes], request: Request) -> AsyncIterator[bytes]:
    """Chat's events as relayed (whole events); an `error` event that refuses the question as asked (422
    llm_content_filtered: the model's content filter refused the prompt) withdraws it, as that status would
    have before the stream began, so that the reworded question is neither rate limited nor a 409."""
    async for chunk in chunks:
        if _is_refusal_event(chunk):
            await withdraw(request)
        yield chunk


def refuses(event: str, data: object) -> bool:
    """Whether a chat stream's event refuses the question as asked: an `error` whose status is a refusal."""
    status = data.get("status") if event == "error" and isinstance(data, dict) else None
    return isinstance(status, int) and is_refusal(status)


def _is_refusal_event(chunk: bytes) -> bool:
    if b"event: error" not in chunk:
        return False
    for block in chunk.split(b"\n\n"):
        lines = block.strip().split(b"\n")
        if lines[0] == b"event: error" and len(lines) > 1 and lines[1].startswith(b"data:"):
            try:
                return refuses("error", json.loads(lines[1].removeprefix(b"data:")))
            except ValueError:
                return False
    return False
