"""The CSV export relayed by a real gateway over real HTTP as it arrives, from a stand-in analytics service
that sends the file in chunks and holds the last one back until the test has seen the first bytes."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from services.gateway.main import create_app
from tests.integration.gateway.analytics_stand_in import PASSWORD, gateway_settings
from tests.support import serve_in_thread, wait_until

pytestmark = pytest.mark.integration

HEADER = b"request_id,submitted_at,query,outcome\n"
CHUNKS = [HEADER] + [
    b"".join(b"r%d-%d,2026-01-01T10:00:00Z,how do I log in?,answered\n" % (part, row) for row in range(2000))
    for part in range(3)
]
EXPORT = b"".join(CHUNKS)
DISPOSITION = 'attachment; filename="cairn-requests.csv"'
HOLD_S = 5  # how long the stand-in holds the last chunk back for a test that never lets it go
INVALID = {"error": "invalid_request", "message": "from: Input should be a valid datetime", "detail": []}


@dataclass
class Export:
    """What the stand-in was asked and sent; `release` lets its last chunk go, `cut` drops the connection instead."""

    release: threading.Event = field(default_factory=threading.Event)
    cut: bool = False
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    finished: bool = False  # the last chunk went out
    stopped: bool = False  # the body generator ended, however


def _analytics(export: Export) -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/analytics/export.csv")
    async def export_csv(request: Request):
        export.seen.append((request.url.query, dict(request.headers)))
        if request.query_params.get("from") == "yesterday":
            return JSONResponse(INVALID, status_code=422)

        async def chunks():
            try:
                for chunk in CHUNKS[:-1]:
                    yield chunk
                    await asyncio.sleep(0.1)
                if export.cut:
                    raise RuntimeError("the database went away")  # uvicorn drops the connection mid-body
                await asyncio.to_thread(export.release.wait, HOLD_S)
                export.finished = True
                yield CHUNKS[-1]
            finally:
                export.stopped = True

        csv = "text/csv; charset=utf-8"
        return StreamingResponse(chunks(), media_type=csv, headers={"Content-Disposition": DISPOSITION})

    return app


@pytest.fixture
def export() -> Export:
    return Export()


@pytest.fixture
def gateway(redis_url, amqp_url, unique, export):
    with serve_in_thread(_analytics(export)) as analytics_url:
        settings = gateway_settings(redis_url, amqp_url, unique, analytics_url)
        with serve_in_thread(create_app(settings)) as url:
            yield url
    export.release.set()


def _auth(gateway: str, username: str = "ana") -> dict[str, str]:
    response = httpx.post(f"{gateway}/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _open(gateway: str, headers: dict[str, str], **params: str):
    url = f"{gateway}/api/analytics/export.csv"
    return httpx.stream("GET", url, params=params, headers=headers, timeout=HOLD_S * 3)


def test_the_first_bytes_arrive_while_analytics_still_holds_the_last_chunk(gateway, export):
    headers = {**_auth(gateway), "X-Request-ID": "export-1"}
    with _open(gateway, headers, **{"from": "2026-01-01T00:00:00Z", "model": "offline"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/csv; charset=utf-8"
        assert response.headers["content-disposition"] == DISPOSITION
        assert response.headers["x-request-id"] == "export-1"
        pieces = response.iter_raw()
        first = next(pieces)
        assert first and EXPORT.startswith(first)
        assert not export.finished  # a buffering gateway would have waited the HOLD_S out before sending anything
        export.release.set()
        body = first + b"".join(pieces)
    assert body == EXPORT
    query, sent = export.seen[-1]
    assert query == "from=2026-01-01T00%3A00%3A00Z&model=offline"
    assert sent["x-request-id"] == "export-1" and sent["x-user-roles"] == "analyst"


def test_a_client_that_goes_away_stops_the_export_behind(gateway, export):
    with _open(gateway, _auth(gateway)) as response:
        assert next(response.iter_raw())
    wait_until(lambda: export.stopped, timeout=HOLD_S - 1, interval=0.05, what="analytics to stop the export")
    assert not export.finished


def test_an_export_cut_short_by_analytics_is_cut_short_for_the_client(gateway, export):
    export.cut = True
    with _open(gateway, _auth(gateway)) as response:
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):  # never a file that looks whole, nor an SSE error line in it
            response.read()


def test_an_invalid_request_is_answered_with_the_json_analytics_sent(gateway, export):
    response = httpx.get(f"{gateway}/api/analytics/export.csv", params={"from": "yesterday"}, headers=_auth(gateway))
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/json"
    assert response.json() == INVALID


def test_a_plain_user_cannot_export(gateway, export):
    response = httpx.get(f"{gateway}/api/analytics/export.csv", headers=_auth(gateway, "ann"))
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    assert export.seen == []

