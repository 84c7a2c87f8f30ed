"""Retrieval's document library over HTTP (GET /documents), for the never-cited report, and whether retrieval
answers and accepts analytics' service token, for /readyz."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import httpx

from shared.errors import DependencyUnavailable
from shared.replica_calls import ReplicasHealth
from shared.settings import CommonSettings
from shared.web import SERVICE_TOKEN_HEADER, internal_headers, token_verdict

log = logging.getLogger(__name__)

PAGE_SIZE = 1000  # the most retrieval's GET /documents gives at once


class HttpDocumentLibrary:
    """DocumentLibrary on retrieval's API, through a pooled client opened in the lifespan. Of several replicas,
    the first that lists its documents is used: a listing is read-only, so a failed one is asked of the next."""

    def __init__(
        self, *, client: httpx.AsyncClient, settings: CommonSettings, base_urls: Sequence[str], timeout_s: float
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if not base_urls:
            raise ValueError("base_urls needs at least one URL")
        self._client = client
        self._settings = settings
        self._base_urls = tuple(url.rstrip("/") for url in base_urls)
        self._timeout = timeout_s

    async def document_ids(self) -> list[str]:
        """Every doc_id, following retrieval's pages (next_cursor) to the last one."""
        for base_url in self._base_urls:
            try:
                return await self._listed(base_url)
            except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
                # Down, slow, refusing our token, or answering something else than a document list.
                log.warning("retrieval's document list failed", extra={"url": base_url, "error": repr(exc)[:300]})
        raise DependencyUnavailable("retrieval", "retrieval did not list its documents")

    async def _listed(self, base_url: str) -> list[str]:
        headers = internal_headers(self._settings)
        ids: list[str] = []
        params: dict[str, str | int] = {"limit": PAGE_SIZE}
        while True:
            response = await self._client.get(
                f"{base_url}/documents", headers=headers, params=params, timeout=self._timeout
            )
            response.raise_for_status()
            body = response.json()
            ids += [str(document["doc_id"]) for document in body["documents"]]
            cursor = body.get("next_cursor")
            if not cursor:
                return ids
            if cursor == params.get("cursor"):
                raise ValueError("retrieval gave the same next_cursor twice")
            params["cursor"] = cursor

    async def readiness(self) -> dict[str, bool]:
        """`retrieval`: a replica answers /healthz; `retrieval_service_token` is false when every replica that
        answered refuses analytics' token (shared.replica_calls.ReplicasHealth)."""
        verdicts = await asyncio.gather(*(self._healthz(url) for url in self._base_urls))
        health = ReplicasHealth(
            answered=sum(v is not None for v in verdicts),
            refusing=tuple(url for url, v in zip(self._base_urls, verdicts, strict=True) if v is False),
        )
        if health.refusing:
            log.error(
                "replicas refuse the service token; CAIRN_SERVICE_TOKEN differs",
                extra={"upstream": "retrieval", "refusing": ",".join(health.refusing)},
            )
        return health.checks("retrieval")

    async def _healthz(self, base_url: str) -> bool | None:
        """None: no answer; else whether the replica accepts the token (True when it does not say)."""
        token = self._settings.service_token.get_secret_value()
        try:
            response = await self._client.get(
                f"{base_url}/healthz", headers={SERVICE_TOKEN_HEADER: token}, timeout=min(self._timeout, 2.0)
            )
            if response.status_code != 200:
                return None
            return token_verdict(response.json()) is not False
        except (httpx.HTTPError, ValueError):
            return None
