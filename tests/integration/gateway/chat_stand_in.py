"""A stand-in for the chat service behind the gateway, and a gateway wired to it, for the tests of the
gateway's limits and feedback."""
from __future__ import annotations

import asyncio
import json

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.settings import Settings
from services.gateway.users import add_user
from tests.support import free_port, own_outbox

PASSWORD = "correct horse battery"


def _answer(request: Request) -> dict:
    """The fields of chat's answer the gateway reads, with the request id chat was called with."""
    return {
        "query": "q",
        "answer": "An answer [1].",
        "conversation_id": None,
        "citations": [],
        "sources": [],
        "related_docs": [],
        "confidence": {"level": "High", "score": 0.9, "reason": "stand-in"},
        "grounding": None,
        "metadata": {
            "request_id": request.headers.get("x-request-id"),
            "kind": "answer",
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        },
    }


def chat_like_app(*models: str) -> FastAPI:
    """An app that answers as chat does at /healthz and /models (`stand-in-llm` first and the default), for the
    stand-ins to add their /chat routes to."""
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/models")
    async def listed_models() -> dict:
        return {"default": "stand-in-llm", "models": ["stand-in-llm", *models]}

    return app


def chat_stand_in(*, dies_mid_stream: bool = False) -> FastAPI:
    """`dies_mid_stream`: /chat/stream sends its `sources` and a first token, then fails, so that the server
    can only drop the connection."""
    app = chat_like_app()

    @app.post("/chat")
    async def chat(request: Request) -> dict:
        return _answer(request)

    @app.post("/chat/stream")
    async def chat_stream(request: Request) -> StreamingResponse:
        async def events():
            yield f"event: sources\ndata: {json.dumps({'sources': []})}\n\n"
            if dies_mid_stream:
                yield f"event: token\ndata: {json.dumps({'text': 'Run'})}\n\n"
                raise RuntimeError("chat died mid-answer")
            yield f"event: done\ndata: {json.dumps(_answer(request))}\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def gateway_settings(*, redis_url: str, prefix: str, chat_url: str, **overrides) -> Settings:
    """Settings for a gateway on its own Redis prefix, with users ann, bob (user) and ada (admin). Retrieval
    and analytics, unless given, are a port where nothing listens, never whatever runs on the defaults."""
    asyncio.run(_seed_users(redis_url, prefix))
    nothing = f"http://127.0.0.1:{free_port()}"
    overrides = {"retrieval_urls": [nothing], "analytics_url": nothing, "outbox_path": own_outbox()} | overrides
    return Settings(redis_url=redis_url, redis_prefix=prefix, chat_url=chat_url, **overrides)


async def _seed_users(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
    for name, roles in (("ann", ["user"]), ("bob", ["user"]), ("ada", ["admin"])):
        await add_user(users=users, username=name, password=PASSWORD, roles=roles)
    await redis.aclose()


def login(client, username: str = "ann", **kwargs) -> dict[str, str]:
    """Authorization headers for a fresh session of `username`."""
    response = client.post("/auth/login", json={"username": username, "password": PASSWORD}, **kwargs)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}
