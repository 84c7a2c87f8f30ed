"""Slow CSV downloads and a full connection pool, against `python -m services.analytics` on SQLite and on
PostgreSQL: the reports keep answering, and nothing is ever a 500.

A held export is a client that reads the response head and then stops reading, on a socket with a small
receive buffer: once the kernel's and uvicorn's buffers are full, the export waits in the middle of its
rows with its database connection in hand, as it does for a slow download.
"""
from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.settings import Settings
from tests.integration.analytics.event_stream import AnalyticsProcess, delete_topology
from tests.integration.analytics.pg_databases import fresh_database
from tests.integration.analytics.synthetic_traffic import fill

pytestmark = pytest.mark.integration

# About 3 MB of CSV: more than a loopback socket's buffers hold, so a download that is not read stays open.
REQUESTS = 20_000


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def filled_database(request, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a database holding REQUESTS requests; the tests only read it, so they share one fill."""
    if request.param == "sqlite":
        url = Settings(data_dir=tmp_path_factory.mktemp("filled") / "data", db_url=None).database_url
        with _filled(url):
            yield url
    else:
        with fresh_database(request.getfixturevalue("postgres_server_url")) as url, _filled(url):
            yield url


@contextmanager
def _filled(url: str) -> Iterator[None]:
    store = SqlEventStore.from_url(url)
    try:
        store.create_schema()
        fill(store, REQUESTS)
    finally:
        store.close()
    yield


@pytest.fixture
def start_analytics(tmp_path: Path, amqp_url: str, unique: str, filled_database: str):
    started: list[AnalyticsProcess] = []

    def start(**env: str) -> AnalyticsProcess:
        process = AnalyticsProcess(
            data_dir=tmp_path / "data", amqp_url=amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics",
            db_url=filled_database, env=env,
        )
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        process.stop()
    asyncio.run(delete_topology(amqp_url, exchange=f"{unique}.events", queue=f"{unique}.analytics"))


class HeldExport:
    """GET /analytics/export.csv on a raw socket that reads the status line and then stops reading."""

    def __init__(self, analytics: AnalyticsProcess) -> None:
        self.socket = socket.socket()
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.socket.settimeout(60)
        self.socket.connect(("127.0.0.1", analytics.port))
        self.socket.sendall(
            f"GET /analytics/export.csv HTTP/1.1\r\nHost: analytics\r\nX-Service-Token: {analytics.token}\r\n\r\n"
            .encode()
        )
        self.head = self.socket.recv(4096).decode("latin-1")
        if not self.head.startswith("HTTP/1.1 200"):  # an error answer is short: read it whole
            length = int(re.search(r"(?im)^content-length: *(\d+)", self.head).group(1))
            while len(self.head.partition("\r\n\r\n")[2]) < length:
                self.head += self.socket.recv(4096).decode("latin-1")

    @property
    def status(self) -> int:
        return int(self.head.split(" ", 2)[1])

    def close(self) -> None:
        self.socket.close()


def _held_exports(analytics: AnalyticsProcess, count: int) -> list[HeldExport]:
    return [HeldExport(analytics) for _ in range(count)]


def test_slow_exports_leave_the_reports_a_connection(start_analytics) -> None:
    analytics = start_analytics()  # the default pool: 5 connections and 10 more on demand
    held = _held_exports(analytics, 16)
    try:
        statuses = [export.status for export in held]
        assert 500 not in statuses, [export.head[:200] for export in held if export.status == 500]
        refused = [export for export in held if export.status == 429]
        assert refused and all(export.status in (200, 429) for export in held), statuses
        assert "retry-after: 5" in refused[0].head.lower() and "too_many_exports" in refused[0].head

        started = time.monotonic()
        response = httpx.get(f"{analytics.url}/analytics/summary", headers={"X-Service-Token": analytics.token},
                             timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["queries"] == REQUESTS
        assert time.monotonic() - started < 5
    finally:
        for export in held:
            export.close()

    # Downloads that went away give their slots back.
    def export_status() -> int:
        with httpx.stream("GET", f"{analytics.url}/analytics/export.csv",
                          headers={"X-Service-Token": analytics.token}, timeout=60) as response:
            return response.status_code

    deadline = time.monotonic() + 10
    while (status := export_status()) == 429 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert status == 200


async def test_a_full_pool_is_a_503_naming_the_database_with_retry_after(start_analytics) -> None:
    # One connection for the export, one for all the reports, and a short wait for it.
    analytics = start_analytics(
        ANALYTICS_DB_POOL_SIZE="1", ANALYTICS_DB_MAX_OVERFLOW="1", ANALYTICS_MAX_EXPORTS="1",
        ANALYTICS_DB_TIMEOUT_S="0.05",
    )
    held = await asyncio.to_thread(_held_exports, analytics, 1)
    try:
        assert held[0].status == 200, held[0].head
        async with httpx.AsyncClient(base_url=analytics.url, headers={"X-Service-Token": analytics.token},
                                     timeout=60) as client:
            responses = await asyncio.gather(*(client.get("/analytics/summary") for _ in range(8)))
    finally:
        held[0].close()
    statuses = [response.status_code for response in responses]
    assert set(statuses) <= {200, 503} and 503 in statuses, statuses
    busy = next(response for response in responses if response.status_code == 503)
    assert busy.json()["error"] == "database_unavailable"
    assert "busy" in busy.json()["message"]
    assert busy.headers["Retry-After"] == "2"
