"""The route class of the gateway's routers that ask chat questions."""
from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from services.gateway.adapters.upstream import NotDelivered
from services.gateway.asking import AdmittedQuestion, is_refusal, withdraw_question
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
    same request id after Retry-After, it is asked, not refused as request_id_taken."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def withdrawing_handler(request: Request) -> Response:
            try:
                response = await handler(request)
            except Exception as exc:
                if is_refusal(status_of(exc)) or isinstance(exc, NotDelivered):
                    await _withdraw(request)
                raise
            if is_refusal(response.status_code):
                await _withdraw(request)
            return response

        return withdrawing_handler


async def _withdraw(request: Request) -> None:
    question: AdmittedQuestion | None = getattr(request.state, "admitted_question", None)
    if question is not None:
        state = request.app.state
        if await withdraw_question(limiter=state.rate_limiter, owners=state.request_owners, question=question):
            request.state.admitted_question = None  # its request id is free: a resend is no 409
