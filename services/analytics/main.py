"""Wires analytics: the SQL event store (migrated at start), the queue consumer feeding it, retrieval's
document library, and the read API."""
from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager

import httpx
from fastapi import Depends, FastAPI

from services.analytics.adapters.consumer import EventConsumer
from services.analytics.adapters.retrieval_library import HttpDocumentLibrary
from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.api import router
from services.analytics.export_slots import ExportSlots
from services.analytics.settings import Settings
from shared.errors import DependencyUnavailable
from shared.web import create_service_app, service_token_guard

log = logging.getLogger(__name__)

# After an insert was cut short, /readyz asks the database whether an insert could take its lock, bounded by the
# database to WRITES_CHECK_TIMEOUT_S, and waits for the answer at most WRITES_CHECK_WAIT_S (a frozen database).
WRITES_CHECK_TIMEOUT_S = 0.5
WRITES_CHECK_WAIT_S = 1.0
# /readyz waits this long for the database's answer to SELECT 1: a frozen one never answers, nor fails.
PING_WAIT_S = 1.0


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        store = SqlEventStore.from_url(
            settings.database_url, timeout_s=settings.db_timeout_s, statement_timeout_s=settings.statement_timeout_s,
            pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow,
        )
        try:
            await asyncio.to_thread(store.create_schema)
        except DependencyUnavailable:
            log.warning("database unavailable at start; the schema is migrated on first use")
        consumer = EventConsumer(
            amqp_url=settings.amqp_url,
            exchange=settings.events_exchange,
            queue=settings.analytics_queue,
            store=store,
            prefetch=settings.prefetch,
            batch_size=settings.batch_size,
            batch_wait_ms=settings.batch_wait_ms,
        )
        await consumer.start()
        http = httpx.AsyncClient()
        app.state.library = HttpDocumentLibrary(
            client=http, settings=settings, base_urls=settings.retrieval_urls, timeout_s=settings.retrieval_timeout_s
        )
        app.state.store, app.state.consumer = store, consumer
        yield
        await consumer.close()
        await http.aclose()
        await asyncio.to_thread(store.close)

    async def readiness() -> dict[str, bool]:
        store, consumer = getattr(app.state, "store", None), getattr(app.state, "consumer", None)
        library = getattr(app.state, "library", None)
        return {
            "database": store is not None and await _answers_within(PING_WAIT_S, store.ping),
            "database_writes": store is not None and await _answers_within(
                WRITES_CHECK_WAIT_S, functools.partial(store.takes_writes, timeout_s=WRITES_CHECK_TIMEOUT_S)
            ),
            "broker": consumer is not None and consumer.connected,
            **(await library.readiness() if library is not None else {}),
        }

    # Retrieval is reported, not needed: only the never-cited report asks it, and answers its failure with a
    # 503 naming it. Retrieval refusing this replica's service token is needed: that report fails here alone.
    # Writes refused are needed, as the broker is: events are no longer stored, whatever SELECT 1 says.
    app = create_service_app(
        service="analytics",
        title="Cairn analytics",
        lifespan=lifespan,
        readiness=readiness,
        needed={"database", "database_writes", "broker", "retrieval_service_token"},
        service_token=settings.service_token,
    )
    app.state.settings = settings
    app.state.export_slots = ExportSlots(settings.max_exports)
    app.include_router(router, dependencies=[Depends(service_token_guard(settings))])
    return app


async def _answers_within(seconds: float, check: Callable[[], bool]) -> bool:
    """`check()` on a worker thread; False when it has not answered within `seconds` (the thread goes on: the
    store's checks return False at once while an earlier one is still waiting)."""
    try:
        async with asyncio.timeout(seconds):
            return await asyncio.to_thread(check)
    except TimeoutError:
        return False
