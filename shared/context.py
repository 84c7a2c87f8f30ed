"""Per-request context (request id, trace) carried through logs, outgoing calls and events."""
from __future__ import annotations

import secrets
import uuid
from contextvars import ContextVar

request_id_var: ContextVar[str | None] = ContextVar("request_id", default=None)
traceparent_var: ContextVar[str | None] = ContextVar("traceparent", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def new_traceparent() -> str:
    """A fresh W3C traceparent: version 00, random trace and span ids, sampled."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def child_traceparent(parent: str | None) -> str:
    """Same trace as `parent` with a new span id; a new trace when `parent` is missing or malformed."""
    parts = (parent or "").split("-")
    if len(parts) == 4 and len(parts[1]) == 32 and len(parts[2]) == 16:
        return f"{parts[0]}-{parts[1]}-{secrets.token_hex(8)}-{parts[3]}"
    return new_traceparent()


def trace_id_of(traceparent: str | None) -> str | None:
    parts = (traceparent or "").split("-")
    return parts[1] if len(parts) == 4 else None
