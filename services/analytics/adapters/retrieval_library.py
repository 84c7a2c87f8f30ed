"""Retrieval's document library over HTTP (GET /documents), for the never-cited report, and whether retrieval
answers and accepts analytics' service token, for /readyz."""
from __future__ import annotations

import logging

import httpx

from shared.errors import DependencyUnavailable
from shared.settings import CommonSettings
from shared.web import SERVICE_TOKEN_HEADER, internal_headers, token_verdict

log = logging.getLogger(__name__)

PAGE_SIZE = 1000  # the most retrieval's GET /documents gives at once


class HttpDocumentLibrary:
    """DocumentLibrary on retrieval's API, through a pooled client opened in the lifespan."""

    def __init__(self, *, client: httpx.AsyncClient, settings: CommonSettings, base_url: str, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._client = client
        self._settings = settings
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/documents"
        self._timeout = timeout_s

    async def document_ids(self) -> list[str]:
        """Every doc_id, following retrieval's pages (next_cursor) to the last one."""
        try:
            headers = internal_headers(self._settings)
            ids: list[str] = []
            params: dict[str, str | int] = {"limit": PAGE_SIZE}
            while True:
                response = await self._client.get(self._url, headers=headers, params=params, timeout=self._timeout)
                response.raise_for_status()
                body = response.json()
                ids += [str(document["doc_id"]) for document in body["documents"]]
                cursor = body.get("next_cursor")
                if not cursor:
                    return ids
                if cursor == params.get("cursor"):
                    raise ValueError("retrieval gave the same next_cursor twice")
                params["cursor"] = cursor
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # Down, slow, refusing our token, or answering something else than a document list.
            log.warning("retrieval's document list failed", extra={"error": repr(exc)[:300]})
            raise DependencyUnavailable("retrieval", "retrieval did not list its documents") from exc

    async def readiness(self) -> dict[str, bool]:
        """`retrieval` answers /healthz; `retrieval_service_token` is false when it refuses analytics' token."""
        token = self._settings.service_token.get_secret_value()
        try:
            response = await self._client.get(
                f"{self._base_url}/healthz", headers={SERVICE_TOKEN_HEADER: token}, timeout=min(self._timeout, 2.0)
            )
            answered = response.status_code == 200
            refused = answered and token_verdict(response.json()) is False
        except (httpx.HTTPError, ValueError):
            answered = refused = False
        if refused:
            log.error(
                "replicas refuse the service token; CAIRN_SERVICE_TOKEN differs",
                extra={"upstream": "retrieval", "refusing": self._base_url},
            )
        return {"retrieval": answered, "retrieval_service_token": not refused}
