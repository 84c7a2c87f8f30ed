"""The log of a request: what its request line says when the client leaves before the answer or part way through
a streamed one, and how often the traceback of an error after the stream began is written. A real app from
shared.web.create_service_app, served by uvicorn over loopback as a Cairn service is."""
from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator

import httpx
import pytest
from fastapi.responses import StreamingResponse

from shared.web import create_service_app
from tests.support import serve_in_thread, wait_until
from tests.unit.shared.json_logs import json_lines_of

pytestmark = pytest.mark.unit


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    with json_lines_of("probe") as written:
        yield written


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = create_service_app(service="probe", title="probe")

    @app.get("/ticks")
    async def ticks(count: int = 100) -> StreamingResponse:
        async def each() -> object:
            for n in range(count):
                yield f"tick {n}\n".encode()
                await asyncio.sleep(0.02)

        return StreamingResponse(each(), media_type="text/plain")

    @app.get("/breaks")
    async def breaks() -> StreamingResponse:
        async def each() -> object:
            yield b"a first line\n"
            raise RuntimeError("the source went away")

        return StreamingResponse(each(), media_type="text/plain")

    @app.get("/slow")
    async def slow() -> dict:
        await asyncio.sleep(0.6)
        return {"ok": True}

    @app.post("/slow")
    async def slow_with_body(body: dict) -> dict:
        await asyncio.sleep(0.6)
        return body

    with serve_in_thread(app) as served:
        yield served


def _lines(logs: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in logs.getvalue().splitlines()]


def _request_line(logs: io.StringIO, request_id: str) -> dict:
    def line() -> dict | None:
        return next((x for x in _lines(logs) if x["message"] == "request" and x["request_id"] == request_id), None)

    wait_until(lambda: line() is not None, timeout=10, interval=0.05, what="the request line")
    return line()


def test_a_stream_read_to_its_end_is_logged_as_complete(url: str, logs: io.StringIO) -> None:
    response = httpx.get(f"{url}/ticks", params={"count": 3}, headers={"X-Request-ID": "whole-stream"}, timeout=10)
    assert response.status_code == 200 and response.text.count("tick") == 3
    line = _request_line(logs, "whole-stream")
    assert (line["status"], line["route"]) == (200, "/ticks")
    assert "client_disconnected" not in line


def test_a_stream_the_client_leaves_part_way_says_so_in_its_request_line(url: str, logs: io.StringIO) -> None:
    with httpx.stream("GET", f"{url}/ticks", headers={"X-Request-ID": "left-stream"}, timeout=10) as response:
        assert response.status_code == 200
        next(response.iter_bytes())  # the first tick, then the client goes away with ~2 s of stream to go
    line = _request_line(logs, "left-stream")
    assert (line["status"], line["route"], line["client_disconnected"]) == (200, "/ticks", True)
    assert line["latency_ms"] < 1500  # the time until the client left, not the stream's would-be length


def test_an_error_after_the_stream_began_writes_its_traceback_once_with_its_request_id(
    url: str, logs: io.StringIO
) -> None:
    with pytest.raises(httpx.RemoteProtocolError):  # too late for a 500: the connection is dropped
        httpx.get(f"{url}/breaks", headers={"X-Request-ID": "broken-stream"}, timeout=10)
    line = _request_line(logs, "broken-stream")
    assert line["status"] == 200 and "client_disconnected" not in line  # the server cut it, not the client
    tracebacks = [x for x in _lines(logs) if "the source went away" in x.get("exc_info", "")]
    assert [(x["message"], x["request_id"]) for x in tracebacks] == [("unhandled error", "broken-stream")]


def test_a_plain_answer_the_client_waited_for_is_logged_as_complete(url: str, logs: io.StringIO) -> None:
    response = httpx.get(f"{url}/slow", headers={"X-Request-ID": "waited"}, timeout=10)
    assert response.status_code == 200
    line = _request_line(logs, "waited")
    assert (line["status"], line["route"]) == (200, "/slow")
    assert "client_disconnected" not in line


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_plain_answer_the_client_left_before_says_so_in_its_request_line(
    url: str, logs: io.StringIO, method: str
) -> None:
    request_id = f"left-before-answer-{method}"
    body = {"json": {"q": "x"}} if method == "POST" else {}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection before the answer
        httpx.request(method, f"{url}/slow", headers={"X-Request-ID": request_id}, timeout=0.2, **body)
    line = _request_line(logs, request_id)
    assert (line["status"], line["route"], line["client_disconnected"]) == (200, "/slow", True)
