"""The envelope of the events the gateway publishes (ratings, questions chat could not report): the
request in hand and the session that made it."""
from __future__ import annotations

from typing import Any

from services.gateway.domain import Session
from shared.context import current_trace_id, current_traceparent, request_id_var

SOURCE = "gateway"


def envelope(session: Session) -> dict[str, Any]:
    return {
        "source_service": SOURCE,
        "request_id": request_id_var.get(),
        "trace_id": current_trace_id(),
        "traceparent": current_traceparent(),
        "user_id": session.user_id,
        "session_id": session.public_id,
    }
