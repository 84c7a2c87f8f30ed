"""A stand-in for the retrieval service's /search, for chat's integration tests (the e2e test uses the real one)."""
from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

TOKEN = "integration-token"
HEADERS = {"X-Service-Token": TOKEN, "X-User-Id": "u1", "X-User-Roles": "user", "X-Session-Id": "s1"}
RESULTS = [
    {
        "chunk_id": "users.md#0",
        "doc_id": "users.md",
        "content": "To add a user, run cairn user add NAME --role user. The command prompts for the password.",
        "score": 0.68,
        "dense_score": 0.68,
        "keyword_score": None,
        "metadata": {
            "title": "Users and roles", "section": "Adding users", "url": "docs/users.md", "category": "guide",
            "source": "docs/users.md", "chunk_index": 0, "char_start": 0, "char_end": 92,
        },
    },
    {
        "chunk_id": "weather.md#0",
        "doc_id": "weather.md",
        "content": "It rains a lot in spring.",
        "score": 0.05,
        "dense_score": 0.05,
        "keyword_score": None,
        "metadata": {"title": "Weather", "section": "Spring", "chunk_index": 0},
    },
]


def fake_retrieval_app(status: int = 200) -> tuple[FastAPI, list[dict]]:
    """A stand-in for the retrieval service's /search: it records what chat sends."""
    app, calls = FastAPI(), []

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.post("/search")
    async def search(request: Request) -> JSONResponse:
        calls.append({"body": await request.json(), "headers": dict(request.headers)})
        if status != 200:
            return JSONResponse({"error": "internal_error", "message": "boom"}, status_code=status)
        body = calls[-1]["body"]
        return JSONResponse({"query": body["query"], "mode": "dense", "took_ms": 1.0, "results": RESULTS[: body["top_k"]]})

    return app, calls
