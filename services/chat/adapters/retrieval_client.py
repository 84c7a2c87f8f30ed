"""The retrieval service over HTTP (pooled httpx client opened in the lifespan)."""
from __future__ import annotations

import logging
from typing import Any

import httpx

from services.chat.chunks import RetrievedChunk
from shared.caller import Caller
from shared.errors import BadRequest, DependencyUnavailable
from shared.settings import CommonSettings
from shared.web import internal_headers

log = logging.getLogger(__name__)


def chunk_from_result(result: dict[str, Any]) -> RetrievedChunk:
    meta = result.get("metadata") or {}
    dense = result.get("dense_score")
    page = meta.get("page")
    return RetrievedChunk(
        chunk_id=str(result["chunk_id"]),
        doc_id=str(result["doc_id"]),
        content=str(result.get("content") or ""),
        score=float(result["score"]),
        relevance=float(dense if dense is not None else result["score"]),
        title=str(meta.get("title") or ""),
        section=str(meta.get("section") or ""),
        url=meta.get("url") or None,
        page=int(page) if isinstance(page, int | float) and not isinstance(page, bool) else None,
        chunk_index=meta.get("chunk_index"),
    )


class HttpRetrievalClient:
    def __init__(self, *, client: httpx.AsyncClient, settings: CommonSettings, base_url: str, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._client = client
        self._settings = settings
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout_s

    async def search(
        self, *, query: str, top_k: int, filters: dict[str, Any] | None, caller: Caller
    ) -> list[RetrievedChunk]:
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if filters:
            body["filters"] = filters
        headers = internal_headers(
            self._settings, user_id=caller.user_id, user_roles=",".join(caller.roles), session_id=caller.session_id
        )
        try:
            response = await self._client.post(
                f"{self._base_url}/search", json=body, headers=headers, timeout=self._timeout
            )
        except httpx.TimeoutException as exc:
            raise DependencyUnavailable("retrieval", f"retrieval did not answer within {self._timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise DependencyUnavailable("retrieval", f"retrieval is unreachable ({type(exc).__name__})") from exc
        if response.status_code in (400, 422):
            raise BadRequest(f"retrieval rejected the search: {_message_of(response)}", code="invalid_search")
        if response.status_code != 200:
            log.warning("retrieval failed", extra={"status": response.status_code, "detail": _message_of(response)})
            raise DependencyUnavailable("retrieval", f"retrieval answered {response.status_code}")
        try:
            return [chunk_from_result(r) for r in response.json()["results"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise DependencyUnavailable("retrieval", "retrieval sent a response chat cannot read") from exc

    async def ping(self) -> bool:
        try:
            response = await self._client.get(f"{self._base_url}/healthz", timeout=min(self._timeout, 2.0))
        except httpx.HTTPError:
            return False
        return response.status_code == 200


def _message_of(response: httpx.Response) -> str:
    try:
        return str(response.json().get("message", ""))[:300]
    except (ValueError, AttributeError):
        return response.text[:300]
