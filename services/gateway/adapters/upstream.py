"""Forwarding a request to an internal service over a pooled HTTP client."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
from fastapi import Response
from fastapi.responses import StreamingResponse
from fastapi.sse import format_sse_event
from starlette.background import BackgroundTask

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
        return Response(content=upstream.content, status_code=upstream.status_code, headers=_passed(upstream))

    async def forward_stream(self, *, path: str, headers: dict[str, str], body: bytes) -> Response:
        """POST and pass the answer on as it arrives (Server-Sent Events), unbuffered.

        An error answer (not 200) is read whole and returned as is. The upstream response is closed
        when the stream ends or the client goes away, so the service behind stops its work too.
        """
        upstream = await self.open_stream(path=path, headers=headers, body=body)
        if upstream.status_code != 200:
            return await self.read_error(upstream)
        return StreamingResponse(
            self._relay(upstream), status_code=200, headers=_passed(upstream), background=BackgroundTask(upstream.aclose)
        )

    async def open_stream(self, *, path: str, headers: dict[str, str], body: bytes) -> httpx.Response:
        """POST and return the response with its body unread; the caller must aclose() it."""
        request = self._client.build_request("POST", path, content=body, headers=headers)
        try:
            return await self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(self.name) from exc
        except httpx.TransportError as exc:
            raise DependencyUnavailable(self.name) from exc

    async def read_error(self, upstream: httpx.Response) -> Response:
        """A streamed response that is not a stream (an error) passed on whole, and closed."""
        try:
            content = await upstream.aread()
        finally:
            await upstream.aclose()
        return Response(content=content, status_code=upstream.status_code, headers=_passed(upstream))

    async def _relay(self, upstream: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:  # the service went away or went silent mid-stream: say so, then end
            error = UpstreamTimeout(self.name) if isinstance(exc, httpx.TimeoutException) else DependencyUnavailable(self.name)
            # The blank lines first end any event the service left half-sent.
            yield b"\n\n" + format_sse_event(event="error", data_str=json.dumps(error.body()))
        finally:
            await upstream.aclose()

    async def healthy(self) -> bool:
        try:
            return (await self._client.get("/healthz", timeout=2)).status_code == 200
        except httpx.HTTPError:
            return False

    async def aclose(self) -> None:
        await self._client.aclose()


def _passed(upstream: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED and k.lower() != "x-request-id"}


def open_upstream(*, name: str, base_url: str, timeout_s: float) -> Upstream:
    client = httpx.AsyncClient(
        base_url=base_url,
        timeout=httpx.Timeout(timeout_s, connect=3.0),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
    )
    return Upstream(name=name, client=client)
