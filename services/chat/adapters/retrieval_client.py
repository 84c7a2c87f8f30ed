"""The retrieval service over HTTP (pooled httpx client opened in the lifespan)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import httpx

from services.chat.adapters.circuit_breaker import CircuitBreaker
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
        category=str(meta["category"]) if meta.get("category") else None,
        page=int(page) if isinstance(page, int | float) and not isinstance(page, bool) else None,
        chunk_index=meta.get("chunk_index"),
    )


class _Retryable(Exception):
    """A failure worth another attempt: retrieval unreachable or answering 5xx."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HttpRetrievalClient:
    """Searches retrieval with bounded retries (connect errors, 5xx; never 4xx) inside one overall timeout,
    behind a circuit breaker so a dead retrieval costs callers nothing while it cools down."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        settings: CommonSettings,
        base_url: str,
        timeout_s: float,
        attempts: int = 3,
        backoff_base_s: float = 0.1,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if attempts < 1 or backoff_base_s < 0:
            raise ValueError("attempts must be >= 1 and backoff_base_s >= 0")
        self._client = client
        self._settings = settings
        self._base_url = base_url.rstrip("/")
        self._timeout = timeout_s
        self._attempts = attempts
        self._backoff = backoff_base_s
        self.breaker = breaker or CircuitBreaker(name="retrieval", failure_threshold=5, cooldown_s=30.0)

    async def search(
        self, *, query: str, top_k: int, filters: dict[str, Any] | None, caller: Caller
    ) -> list[RetrievedChunk]:
        if not self.breaker.allow():
            raise DependencyUnavailable("retrieval", "retrieval is failing; calls are paused while it recovers")
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if filters:
            body["filters"] = filters
        headers = internal_headers(
            self._settings, user_id=caller.user_id, user_roles=",".join(caller.roles), session_id=caller.session_id
        )
        try:
            response = await self._post_with_retries(body, headers)
        except DependencyUnavailable:
            self.breaker.record_failure()
            raise
        except BaseException:
            self.breaker.abandon()  # cancelled (the caller went away): no verdict on retrieval
            raise
        # retrieval answered: a 4xx is the request's fault, not a sign retrieval is down
        self.breaker.record_success()
        if response.status_code in (400, 422):
            raise BadRequest(f"retrieval rejected the search: {_message_of(response)}", code="invalid_search")
        if response.status_code != 200:
            raise DependencyUnavailable("retrieval", f"retrieval answered {response.status_code}")
        try:
            return [chunk_from_result(r) for r in response.json()["results"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise DependencyUnavailable("retrieval", "retrieval sent a response chat cannot read") from exc

    async def _post_with_retries(self, body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        """The whole exchange, backoff included, stays within the timeout."""
        deadline = time.monotonic() + self._timeout
        reason = "no attempt made"
        for attempt in range(self._attempts):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return await self._attempt(body, headers, remaining)
            except _Retryable as exc:
                reason = exc.reason
            delay = self._backoff * 2**attempt
            if attempt + 1 < self._attempts and time.monotonic() + delay < deadline:
                log.info("retrying retrieval", extra={"attempt": attempt + 1, "reason": reason})
                await asyncio.sleep(delay)
            else:
                break
        raise DependencyUnavailable("retrieval", f"retrieval is unavailable ({reason})")

    async def _attempt(self, body: dict[str, Any], headers: dict[str, str], timeout: float) -> httpx.Response:
        try:
            response = await self._client.post(f"{self._base_url}/search", json=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"no answer within {self._timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise _Retryable(f"unreachable: {type(exc).__name__}") from exc
        if response.status_code >= 500:
            log.warning("retrieval failed", extra={"status": response.status_code, "detail": _message_of(response)})
            raise _Retryable(f"answered {response.status_code}")
        return response

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
