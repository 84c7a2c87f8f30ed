"""/readyz with a frozen PostgreSQL, the real one behind a proxy that stops passing bytes: a stopped server or a
network gone silent holds a query without an error, so readiness must not wait for the database's answer.
Each probe answers within PING_WAIT_S with `database` false, a probe that comes while an earlier ping still
waits answers at once, and readiness comes back by itself when the database answers again."""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.main import PING_WAIT_S, create_app
from services.analytics.settings import Settings
from tests.integration.analytics.pg_databases import fresh_database
from tests.integration.analytics.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


async def _checks(app) -> tuple[dict[str, bool], float]:
    """The checks of one /readyz and how long it took."""
    started = time.monotonic()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:
        response = await client.get("/readyz")
    return response.json()["checks"], time.monotonic() - started


@pytest.fixture
async def proxy(postgres_server_url: str) -> AsyncIterator[TcpProxy]:
    server = make_url(postgres_server_url)
    proxy = TcpProxy(target_host=server.host or "127.0.0.1", target_port=server.port or 5432)
    await proxy.start()
    yield proxy
    proxy.thaw()
    await proxy.stop()


async def test_readiness_answers_in_time_while_the_database_is_frozen_and_recovers_after(
    postgres_server_url: str, proxy: TcpProxy, tmp_path: Path,
) -> None:
    with fresh_database(postgres_server_url) as url:
        store = SqlEventStore.from_url(make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(False))
        app = create_app(Settings(service_token="token", data_dir=tmp_path))
        app.state.store = store  # no lifespan here: the store is put where it would put it
        try:
            await asyncio.to_thread(store.create_schema)  # the proxy runs on this loop
            checks, _ = await _checks(app)
            assert checks["database"] is True  # a pooled connection, which the next ping reuses
            proxy.freeze()
            checks, took = await _checks(app)
            assert checks["database"] is False
            assert took < PING_WAIT_S + 0.5
            # The first ping still waits on its thread: a second probe does not start another that would wait too.
            checks, took = await _checks(app)
            assert checks["database"] is False
            assert took < 0.5
            proxy.thaw()
            deadline = time.monotonic() + 10
            while not (await _checks(app))[0]["database"]:
                assert time.monotonic() < deadline, "readiness did not come back after the database did"
        finally:
            proxy.thaw()
            await asyncio.to_thread(store.close)
