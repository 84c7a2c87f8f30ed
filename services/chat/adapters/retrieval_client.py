"""The retrieval service over HTTP: a pooled aiohttp session opened in the lifespan, balanced over retrieval's
replicas (shared.replicas.ReplicaPool). aiohttp rather than httpx: under concurrency httpx's pool caps a hop
at a few hundred requests/s (docs/benchmarks.md, "Hops")."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from services.chat.adapters.circuit_breaker import CircuitBreaker
from services.chat.chunks import RetrievedChunk
from shared.caller import Caller
from shared.errors import BadRequest, DependencyUnavailable
from shared.replica_calls import CONNECT_TIMEOUT_S, NOT_CONNECTED, NoReplicaConnected, on_a_replica, probe_replicas
from shared.replicas import ReplicaPool
from shared.settings import CommonSettings
from shared.tracing import client_span
from shared.web import CLIENT_KEEP_ALIVE_S, internal_headers

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
    """A failure worth another attempt: retrieval unreachable, silent or answering 5xx. `dependency`: what
    failed, retrieval itself, or what retrieval named in its 503 (chroma: another replica may have its
    index in memory, and retrieval itself is fine)."""

    def __init__(self, reason: str, dependency: str = "retrieval") -> None:
        super().__init__(reason)
        self.reason = reason
        self.dependency = dependency


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class HttpRetrievalClient:
    """Searches retrieval with bounded retries (connect errors, timeouts, 5xx; never 4xx) inside one overall
    timeout, behind a circuit breaker so a dead retrieval costs callers nothing while it cools down.

    Replicas take turns; one that refuses the connection is skipped for a while and the attempt goes at once
    to another replica, without waiting for a backoff; one silent for an attempt's share of the timeout is
    skipped the same way, and an attempt on another replica joins the one it holds. A retry goes to a replica
    that has not failed this search, while there is one."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        settings: CommonSettings,
        replicas: ReplicaPool,
        timeout_s: float,
        attempts: int = 3,
        backoff_base_s: float = 0.1,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if attempts < 1 or backoff_base_s < 0:
            raise ValueError("attempts must be >= 1 and backoff_base_s >= 0")
        self._session = session
        self._settings = settings
        self.replicas = replicas
        self._timeout = timeout_s
        self._attempts = attempts
        self._backoff = backoff_base_s
        self.breaker = breaker or CircuitBreaker(name="retrieval", failure_threshold=5, cooldown_s=30.0)

    async def search(
        self, *, query: str, top_k: int, filters: dict[str, Any] | None, caller: Caller
    ) -> list[RetrievedChunk]:
        if not self.breaker.allow():
            # Told to try again when the breaker lets a trial through; half-open with the trial out, in a second.
            wait_s = max(1, math.ceil(self.breaker.seconds_until_trial()))
            raise DependencyUnavailable(
                "retrieval", "retrieval is failing; calls are paused while it recovers", retry_after=wait_s
            )
        body: dict[str, Any] = {"query": query, "top_k": top_k}
        if filters:
            body["filters"] = filters
        headers = internal_headers(
            self._settings, user_id=caller.user_id, user_roles=",".join(caller.roles), session_id=caller.session_id
        )
        try:
            response = await self._post_with_retries(body, headers)
        except DependencyUnavailable as exc:
            if exc.dependency == "retrieval":
                self.breaker.record_failure()
            else:  # retrieval answered; what it depends on is down (chroma, for a filtered search, say)
                self.breaker.record_success()
            raise
        except BaseException:
            self.breaker.abandon()  # cancelled (the caller went away): no verdict on retrieval
            raise
        # retrieval answered: a 4xx is the request's fault, not a sign retrieval is down
        self.breaker.record_success()
        if response.status in (400, 422):
            raise BadRequest(f"retrieval rejected the search: {_message_of(response)}", code="invalid_search")
        if response.status != 200:
            raise DependencyUnavailable("retrieval", f"retrieval answered {response.status}")
        try:
            return [chunk_from_result(r) for r in response.json()["results"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise DependencyUnavailable("retrieval", "retrieval sent a response chat cannot read") from exc

    async def _post_with_retries(self, body: dict[str, Any], headers: dict[str, str]) -> _Answer:
        """Attempts until one answers, the whole exchange (backoff included) within the timeout. A failed attempt
        is followed by the next after a backoff. One left unanswered for its share of the time left is joined by
        the next on a replica not already asked, and the first answer wins (a search is read-only): a replica that
        takes connections and never answers would otherwise hold the whole timeout."""
        deadline = time.monotonic() + self._timeout
        reason, dependency = "no attempt made", "retrieval"
        asked: set[str] = set()  # replicas with an attempt of this search in flight
        failed: set[str] = set()  # replicas that answered this search with an error
        silent: set[str] = set()  # those of them marked for not answering within their share
        pending: set[asyncio.Task[_Answer]] = set()
        started, next_start = 0, time.monotonic()
        try:
            while True:
                now = time.monotonic()
                may_start = (
                    started < self._attempts
                    and len(asked) < len(self.replicas.urls)
                    and max(now, next_start) < deadline
                )
                if may_start and now >= next_start:
                    for url in asked - silent:  # silent for its share: skipped for a while, like a refusal
                        self.replicas.mark_unreachable(url)
                        silent.add(url)
                        log.warning("retrieval replica has not answered; asking another one too", extra={"url": url})
                    pending.add(asyncio.create_task(self._attempt(body, headers, deadline, asked, failed)))
                    started += 1
                    next_start = now + (deadline - now) / (self._attempts - started + 1)
                    await asyncio.sleep(0)  # the attempt marks its replica asked before the next check
                    continue
                if not pending:
                    if not may_start:
                        break
                    await asyncio.sleep(next_start - now)  # backoff
                    continue
                wait_s = next_start - now if may_start else None
                done, pending = await asyncio.wait(pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    try:
                        return task.result()
                    except _Retryable as exc:
                        reason, dependency = exc.reason, exc.dependency
                        next_start = time.monotonic() + self._backoff * 2 ** (started - 1)
                        if started < self._attempts:
                            log.info("retrying retrieval", extra={"attempt": started, "reason": reason})
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if dependency != "retrieval":
            raise DependencyUnavailable(dependency, f"retrieval cannot reach {dependency} ({reason})")
        raise DependencyUnavailable("retrieval", f"retrieval is unavailable ({reason})")

    async def _attempt(
        self, body: dict[str, Any], headers: dict[str, str], deadline: float, asked: set[str], failed: set[str]
    ) -> _Answer:
        """One search on the next replica not in `asked`, nor in `failed` while another is left (concurrent
        searches move the turn on, which could bring a retry back to the replica that just failed it); when the
        replica refuses the connection, on another one."""

        async def post(url: str) -> _Answer:
            asked.add(url)
            try:
                with client_span("retrieval POST /search", headers, {"server.address": url}):
                    return await self._post(url, body, headers, deadline)
            except _Retryable:
                failed.add(url)
                raise
            finally:
                asked.discard(url)

        avoid = asked | failed if set(self.replicas.urls) - asked - failed else asked
        try:
            return await on_a_replica(self.replicas, post, avoid=avoid)
        except NoReplicaConnected as exc:  # the addresses are in the log, not in an answer users read
            raise _Retryable("unreachable") from exc

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str], deadline: float) -> _Answer:
        remaining = max(deadline - time.monotonic(), 0.001)
        timeout = aiohttp.ClientTimeout(total=remaining, sock_connect=min(remaining, CONNECT_TIMEOUT_S))
        try:
            async with self._session.post(f"{url}/search", json=body, headers=headers, timeout=timeout) as response:
                answer = _Answer(status=response.status, body=await response.read())
        except NOT_CONNECTED:
            raise  # the request never left: on_a_replica sends it elsewhere
        except TimeoutError as exc:
            raise _Retryable(f"no answer within {self._timeout:g} s") from exc
        except aiohttp.ClientError as exc:
            raise _Retryable(f"unreachable: {type(exc).__name__}") from exc
        if answer.status >= 500:
            log.warning("retrieval failed", extra={"status": answer.status, "detail": _message_of(answer), "url": url})
            raise _Retryable(f"answered {answer.status}", dependency=_named_dependency(answer))
        return answer

    async def readiness(self) -> dict[str, bool]:
        token = self._settings.service_token.get_secret_value()
        timeout_s = min(self._timeout, 2.0)
        health = await probe_replicas(self._session, self.replicas, timeout_s=timeout_s, service_token=token)
        return health.checks("retrieval")


def _named_dependency(answer: _Answer) -> str:
    """What a 503 of retrieval names as down ("chroma_unavailable": chroma); else retrieval itself."""
    try:
        code = answer.json().get("error", "") if answer.status == 503 else ""
    except (ValueError, AttributeError):
        code = ""
    dependency = code.removesuffix("_unavailable") if isinstance(code, str) and code.endswith("_unavailable") else ""
    return dependency if dependency and dependency != "retrieval" else "retrieval"


def _message_of(response: _Answer) -> str:
    try:
        return str(response.json().get("message", ""))[:300]
    except (ValueError, AttributeError):
        return response.body.decode("utf-8", "replace")[:300]


def open_session() -> aiohttp.ClientSession:
    """The pooled session for retrieval; each call sets its own timeout from what is left of its budget. An idle
    connection is dropped before retrieval would close it (shared.web.CLIENT_KEEP_ALIVE_S)."""
    connector = aiohttp.TCPConnector(limit=100, limit_per_host=0, keepalive_timeout=CLIENT_KEEP_ALIVE_S)
    return aiohttp.ClientSession(connector=connector)
