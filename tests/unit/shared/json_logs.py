"""The JSON lines a service's logging writes, captured from the root logger at INFO."""
from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from shared.logging import json_handler


@contextmanager
def json_lines_of(service: str) -> Iterator[io.StringIO]:
    written = io.StringIO()
    handler = json_handler(service, written)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    try:
        yield written
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
