"""Forwarding a request to an internal service over a pooled HTTP client."""
from __future__ import annotations

import httpx
from fastapi import Response

from shared.errors import DependencyUnavailable, UpstreamTimeout

# Hop-by-hop and framing headers are the transport's business, not the client's.
_DROPPED = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "server", "date"}


class Upstream:
    def __init__(self, *, name: str, client: httpx.AsyncClient) -> None:
        self.name = name
        self._client = client

    async def forward(
        self,
        *,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None = None,
        params: list[tuple[str, str]] | None = None,
    ) -> Response:
        try:
            upstream = await self._client.request(method, path, content=body, params=params, headers=headers)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(self.name) from exc
        except httpx.TransportError as exc:
            raise DependencyUnavailable(self.name) from exc
        passed = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED and k.lower() != "x-request-id"}
        return Response(content=upstream.content, status_code=upstream.status_code, headers=passed)

    async def healthy(self) -> bool:
        try:
            return (await self._client.get("/healthz", timeout=2)).status_code == 200
        except httpx.HTTPError:
            return False

    async def aclose(self) -> None:
        await self._client.aclose()


def open_upstream(*, name: str, base_url: str, timeout_s: float) -> Upstream:
    client = httpx.AsyncClient(
        base_url=base_url,
        timeout=httpx.Timeout(timeout_s, connect=3.0),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
    )
    return Upstream(name=name, client=client)
