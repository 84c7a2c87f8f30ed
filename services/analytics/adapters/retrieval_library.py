"""Retrieval's document library over HTTP (GET /documents), for the never-cited report."""
from __future__ import annotations

import logging

import httpx

from shared.errors import DependencyUnavailable
from shared.settings import CommonSettings
from shared.web import internal_headers

log = logging.getLogger(__name__)


class HttpDocumentLibrary:
    """DocumentLibrary on retrieval's API, through a pooled client opened in the lifespan."""

    def __init__(self, *, client: httpx.AsyncClient, settings: CommonSettings, base_url: str, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._client = client
        self._settings = settings
        self._url = f"{base_url.rstrip('/')}/documents"
        self._timeout = timeout_s

    async def document_ids(self) -> list[str]:
        try:
            headers = internal_headers(self._settings)
            response = await self._client.get(self._url, headers=headers, timeout=self._timeout)
            response.raise_for_status()
            return [str(document["doc_id"]) for document in response.json()["documents"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            # Down, slow, refusing our token, or answering something else than a document list.
            log.warning("retrieval's document list failed", extra={"error": repr(exc)[:300]})
            raise DependencyUnavailable("retrieval", "retrieval did not list its documents") from exc
