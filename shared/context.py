"""Per-request context carried through logs, outgoing calls and events: the request id, the user the
request acts for, and the trace (the current OpenTelemetry span; see shared/tracing.py)."""
from __future__ import annotations

import uuid
from contextvars import ContextVar
from dataclasses import dataclass

from opentelemetry import trace

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)


@dataclass
class RequestUser:
    """Who the request in hand acts for. One mutable record per request, set up by the request middleware,
    so that a dependency that authenticates the caller can name them to the middleware's log line (a
    context variable set in a dependency does not always flow back up to the middleware)."""

    id: str | None = None


request_user_var: ContextVar[RequestUser | None] = ContextVar("request_user", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def set_user_id(user_id: str | None) -> None:
    """Name the user the request in hand acts for (no-op outside a request)."""
    if (user := request_user_var.get()) is not None:
        user.id = user_id


def current_user_id() -> str | None:
    user = request_user_var.get()
    return user.id if user else None


def current_trace_id() -> str | None:
    """The W3C trace id (32 hex digits) of the current span, None outside a trace."""
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.is_valid else None


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current span, None outside a trace."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{trace.format_trace_id(context.trace_id)}-{trace.format_span_id(context.span_id)}-{context.trace_flags:02x}"
