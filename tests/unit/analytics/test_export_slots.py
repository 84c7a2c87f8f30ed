"""The CSV export's slot and connection come back however its response ends."""
import asyncio

import pytest
from starlette.requests import ClientDisconnect

from services.analytics.api import CsvResponse
from services.analytics.errors import TooManyExports
from services.analytics.export_slots import ExportSlots

pytestmark = pytest.mark.unit

SCOPE = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"}, "method": "GET", "path": "/", "headers": []}


class Rows:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


async def no_request() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


def test_a_response_whose_client_left_before_its_body_began_gives_back_the_slot_and_the_connection():
    async def gone(message: dict) -> None:
        raise OSError("the client went away")  # before the status line, so the body never starts

    slots, rows = ExportSlots(1), Rows()
    slots.take()
    response = CsvResponse(slots.stream(iter(["a,b\r\n"]), holding=rows))
    with pytest.raises((OSError, ClientDisconnect)):
        asyncio.run(response(SCOPE, no_request, gone))
    assert (slots.in_use, rows.closed) == (0, 1)
    slots.take()  # the slot is free again


def test_a_finished_download_gives_back_the_slot_once():
    sent: list[dict] = []

    async def collect(message: dict) -> None:
        sent.append(message)

    slots, rows = ExportSlots(1), Rows()
    slots.take()
    with pytest.raises(TooManyExports):
        slots.take()
    asyncio.run(CsvResponse(slots.stream(iter(["a,b\r\n", "1,2\r\n"]), holding=rows))(SCOPE, no_request, collect))
    assert b"".join(m.get("body", b"") for m in sent) == b"a,b\r\n1,2\r\n"
    assert (slots.in_use, rows.closed) == (0, 1)
