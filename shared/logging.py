"""JSON logs, one object per line, each carrying the request_id and trace_id of the request in hand."""
from __future__ import annotations

import logging
import sys
from typing import TextIO

from pythonjsonlogger.json import JsonFormatter

from shared.context import current_trace_id, request_id_var


class _RequestContextFilter(logging.Filter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        if _traceback_written_before(record):
            return False
        # A record may name its service itself: the request line does, for apps sharing one process.
        record.__dict__.setdefault("service", self.service)
        record.request_id = request_id_var.get()
        record.trace_id = current_trace_id()
        return True


def _traceback_written_before(record: logging.LogRecord) -> bool:
    """Whether another record wrote the record's exception already; the first to carry it is noted on it.

    An error raised after a streamed response began is logged by the request middleware, with its request id,
    then re-raised so that the server drops the connection: Starlette's error middleware and uvicorn would
    each write the same traceback again, without the request id."""
    error = record.exc_info[1] if record.exc_info else None
    if error is None:
        return False
    first = error.__dict__.setdefault("_cairn_logged_by", record)  # one record may pass several handlers
    return first is not record


def json_handler(service: str, stream: TextIO | None = None) -> logging.Handler:
    """A handler writing each record as one JSON line with service, request_id and trace_id."""
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.addFilter(_RequestContextFilter(service))
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(service)s %(request_id)s %(trace_id)s",
            rename_fields={"asctime": "ts", "levelname": "level", "name": "logger"},
        )
    )
    return handler


def configure_logging(service: str, level: str = "INFO") -> None:
    root = logging.getLogger()
    root.handlers[:] = [json_handler(service)]
    root.setLevel(level.upper())
    # uvicorn's access log would repeat our own per-request line without the request id.
    logging.getLogger("uvicorn.access").disabled = True
    for noisy in ("httpx", "httpx2", "httpcore", "aio_pika", "aiormq", "chromadb", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
