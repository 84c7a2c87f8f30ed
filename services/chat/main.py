"""The chat app: wiring of the concrete adapters, opened and closed in the lifespan."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from services.chat.adapters.circuit_breaker import CircuitBreaker
from services.chat.adapters.generator import build_generator
from services.chat.adapters.redis_conversations import open_conversation_store
from services.chat.adapters.retrieval_client import HttpRetrievalClient, open_session
from services.chat.api import router
from services.chat.pipeline import ChatPipeline, PipelineConfig
from services.chat.ports import ConversationStore, Generator, Retriever
from services.chat.reformulation import reformulator_from
from services.chat.settings import Settings
from shared.broker import EventPublisher, open_publisher
from shared.replicas import ReplicaPool
from shared.web import create_service_app, narrow_schema_field, service_token_guard

log = logging.getLogger(__name__)


def create_app(
    settings: Settings | None = None,
    *,
    retriever: Retriever | None = None,
    generator: Generator | None = None,
    publisher: EventPublisher | None = None,
    conversations: ConversationStore | None = None,
) -> FastAPI:
    """Build the app; tests may pass their own retriever, generator, publisher or conversation store."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        http = open_session()
        owned_generator = None if generator else build_generator(settings)
        owned_store = None if conversations else open_conversation_store(settings)
        events = publisher or open_publisher(settings, service="chat")
        app.state.pipeline = ChatPipeline(
            retriever=retriever
            or HttpRetrievalClient(
                session=http,
                settings=settings,
                replicas=ReplicaPool(service="retrieval", urls=settings.retrieval_urls),
                timeout_s=settings.retrieval_timeout_s,
                attempts=settings.retrieval_attempts,
                backoff_base_s=settings.retrieval_backoff_s,
                breaker=CircuitBreaker(
                    name="retrieval",
                    failure_threshold=settings.retrieval_breaker_failures,
                    cooldown_s=settings.retrieval_breaker_cooldown_s,
                ),
            ),
            generator=generator or owned_generator,
            publisher=events,
            config=PipelineConfig.from_settings(settings),
            conversations=conversations or owned_store,
            reformulator=reformulator_from(settings, generator or owned_generator),
        )
        await events.start()
        log.info(
            "chat ready",
            extra={
                "llm": settings.llm_base_url or "offline",
                "model": settings.llm_model,
                "retrieval": ",".join(settings.retrieval_urls),
            },
        )
        try:
            yield
        finally:
            await events.close()
            if owned_generator:
                await owned_generator.close()
            if owned_store:
                await owned_store.aclose()
            await http.close()

    async def readiness() -> dict[str, bool]:
        pipeline: ChatPipeline = app.state.pipeline
        # Not a readiness condition: requests never wait on it. The publisher connects when it has events to
        # send, so an idle one that has not connected yet is no news.
        if getattr(pipeline.publisher, "connected", True) is False and pipeline.publisher.backlog:
            log.warning("events broker not connected", extra={"backlog": pipeline.publisher.backlog})
        # At once, not one after another: each may take its own timeout, and a probe gives up after a few seconds.
        retrieval, llm, conversations = await asyncio.gather(
            pipeline.retriever.readiness(), pipeline.generator.ping(), _conversations_answer(pipeline)
        )
        return {**retrieval, "llm": llm, **conversations}

    # Retrieval, the model and the conversation store are reported, not needed: chat answers their failure with a
    # 503 / 502 naming them (and questions without a conversation_id need no conversation store).
    # Retrieval refusing chat's service token is needed: it fails every question sent to this replica alone.
    app = create_service_app(
        service="chat",
        title="Cairn chat",
        lifespan=lifespan,
        readiness=readiness,
        needed={"retrieval_service_token"},
        service_token=settings.service_token,
    )
    app.state.settings = settings
    app.include_router(router, dependencies=[Depends(service_token_guard(settings))])
    allowed = [{"type": "string", "enum": list(settings.chat_models)}, {"type": "null"}]
    narrow_schema_field(app, model="ChatRequest", field="model_id", any_of=allowed)
    return app


async def _conversations_answer(pipeline: ChatPipeline) -> dict[str, bool]:
    if pipeline.conversations is None:
        return {}
    return {"conversation_store": await pipeline.conversations.ping()}
