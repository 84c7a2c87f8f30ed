"""Wires the gateway: Redis-backed users and sessions, pooled clients to the internal services' replicas, routes."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException

from services.gateway import openai_errors, passwords
from services.gateway.adapters.redis_rate_limits import RedisRateLimiter
from services.gateway.adapters.redis_request_owners import RedisRequestOwners
from services.gateway.adapters.redis_eviction import warn_if_keys_may_be_evicted
from services.gateway.adapters.redis_store import RedisSessionStore, RedisUserStore, connect
from services.gateway.adapters.upstream import Upstream, open_session
from services.gateway.api import api_router, auth_router
from services.gateway.dashboard import router as dashboard_router
from services.gateway.feedback_api import router as feedback_router
from services.gateway.middleware import gateway_middleware
from services.gateway.model_offer import OfferedModels
from services.gateway.openai_api import router as openai_router
from services.gateway.password_api import router as password_router
from services.gateway.sessions_api import sessions_router
from services.gateway.users_api import router as users_router
from services.gateway.settings import Settings
from services.gateway.web_page import router as web_page_router
from shared.broker import open_publisher
from shared.replicas import ReplicaPool
from shared.web import create_service_app


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        redis = connect(settings.redis_url, timeout_s=settings.redis_timeout_s)
        await warn_if_keys_may_be_evicted(redis)
        await asyncio.to_thread(passwords.prepare)
        store_args = {"prefix": settings.redis_prefix, "timeout_s": settings.redis_timeout_s}
        app.state.users = RedisUserStore(redis, **store_args)
        app.state.sessions = RedisSessionStore(redis, **store_args)
        app.state.rate_limiter = RedisRateLimiter(redis, **store_args)
        app.state.request_owners = RedisRequestOwners(redis, **store_args)
        app.state.offered_models = OfferedModels(ttl_s=30)  # chat's models, for /v1
        app.state.publisher = open_publisher(settings, service="gateway")  # feedback events, kept while the broker is down
        await app.state.publisher.start()
        http = open_session(timeout_s=settings.upstream_timeout_s)
        # With several chat replicas, each question (a POST that publishes events) gets a new connection, so one
        # sent just after a replica died is refused and answered by another replica instead of failing as if it
        # had been in flight there. With one, there is no other replica to turn to, and a kept-alive connection
        # saves the question a connect on both sides.
        single_chat = len(settings.chat_urls) == 1
        chat_http = open_session(timeout_s=settings.upstream_timeout_s, reuse_connections=single_chat)
        app.state.upstreams = {
            name: Upstream(name=name, session=session, replicas=ReplicaPool(service=name, urls=urls))
            for name, session, urls in (
                ("chat", chat_http, settings.chat_urls),
                ("retrieval", http, settings.retrieval_urls),
                ("analytics", http, (settings.analytics_url,)),
            )
        }
        yield
        await app.state.publisher.close()
        await http.close()
        await chat_http.close()
        await redis.aclose()

    async def readiness() -> dict[str, bool]:
        checks = {"redis": await app.state.sessions.ping()}
        token = settings.service_token.get_secret_value()
        # At once: each probe may wait its 2 s, and one after the other they would outlast a 3 s probe timeout.
        upstreams = app.state.upstreams
        found = await asyncio.gather(*(upstream.health(service_token=token) for upstream in upstreams.values()))
        for name, health in zip(upstreams, found, strict=True):
            checks |= health.checks(name)
        return checks

    app = create_service_app(
        service="gateway",
        title="Cairn gateway",
        lifespan=lifespan,
        readiness=readiness,
        # The upstreams are reported: a down one is answered with a 503 naming it, and other gateways could do
        # no better. One that refuses this gateway's service token fails every request sent here alone.
        needed={"redis", "chat_service_token", "retrieval_service_token", "analytics_service_token"},
        middleware=gateway_middleware(settings),
    )
    app.state.settings = settings
    app.include_router(auth_router)
    app.include_router(sessions_router)
    app.include_router(password_router)
    app.include_router(api_router)
    app.include_router(feedback_router)
    app.include_router(users_router)
    app.include_router(openai_router)
    app.add_exception_handler(HTTPException, openai_errors.under_v1(app.exception_handlers[HTTPException]))
    app.include_router(web_page_router)
    app.include_router(dashboard_router)
    return app
