"""Forwarding a request to one replica of an internal service over a pooled aiohttp session.

Replicas take turns (shared.replicas.ReplicaPool). A replica that refuses the connection is skipped for a
while and the request goes to the next one; a request that reached a replica is never sent again,
since a POST /chat may have done its work, unless it changes nothing (a read, a search): one of those that
failed on the replica it reached is sent once more, to another replica. aiohttp rather than httpx: under 32
concurrent requests httpx's pool caps a hop at a few hundred requests/s with p99 near 200 ms
(docs/benchmarks.md, "Hops").
"""
from __future__ import annotations

import codecs
import json
import logging
import re
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlencode

import aiohttp
from fastapi import Response
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.sse import format_sse_event
from httpx_sse import EventSource, ServerSentEvent
from starlette.background import BackgroundTask
from yarl import URL

from shared.errors import DependencyUnavailable, ServiceError, UpstreamTimeout
from shared.json_body import is_json_type
from shared.metrics import count_stream_failure
from shared.replica_calls import CONNECT_TIMEOUT_S, NoReplicaConnected, ReplicasHealth, on_a_replica, probe_replicas
from shared.replicas import ReplicaPool
from shared.tracing import client_span
from shared.web import CLIENT_KEEP_ALIVE_S, HTTP_ERROR_CODES

log = logging.getLogger(__name__)

# Hop-by-hop headers (RFC 9110, 7.6.1) and framing headers are the transport's business, not the client's;
# so are the headers the upstream's Connection header names. What may keep an answer is the gateway's to say
# (middleware.SecurityHeadersMiddleware: no-store), not a service's: chat's stream says no-cache to the gateway.
_DROPPED = {
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    "proxy-authenticate", "proxy-authorization", "content-length", "content-encoding", "server", "date",
    "cache-control",
}
# The codes of Cairn's own errors, for a client error a service answered outside Cairn's shape.
_CLIENT_ERROR_CODES = {
    **HTTP_ERROR_CODES, 400: "bad_request", 415: "unsupported_media_type", 422: "invalid_request", 429: "rate_limited",
}
# Answers of a replica failing (a proxy with nothing behind it, a service not ready or overloaded, a timeout).
_REPLICA_FAILING = frozenset({502, 503, 504})
# A body goes on with the caller's Content-Type or none: aiohttp would otherwise call it application/octet-stream.
_NO_GUESSED_TYPE = ("Content-Type",)


class NotDelivered(DependencyUnavailable):
    """No replica of the service took the connection: the request never reached it, so the same request
    may be sent again as it is (a question keeps no request id and no place in the rate limit)."""

    def __init__(self, dependency: str) -> None:
        super().__init__(dependency)


class ConnectionLost(DependencyUnavailable):
    """The service took the request, then the connection broke before the answer was complete: the service may
    have died mid-request (killed, out of memory), and done part of the work or none."""

    def __init__(self, dependency: str) -> None:
        super().__init__(dependency)


def _failure(name: str, exc: BaseException) -> ServiceError:
    return UpstreamTimeout(name) if isinstance(exc, TimeoutError) else ConnectionLost(name)


class UpstreamStream:
    """A response read as it arrives. aclose() ends it, and with it the connection, so the service stops its work."""

    def __init__(self, *, name: str, response: aiohttp.ClientResponse) -> None:
        self.name = name
        self.status_code = response.status
        self.headers = response.headers
        self._response = response

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        async for chunk in self._response.content.iter_any():
            yield chunk

    async def aiter_text(self) -> AsyncIterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async for chunk in self.aiter_raw():
            if text := decoder.decode(chunk):
                yield text

    async def events(self) -> AsyncIterator[ServerSentEvent]:
        """The Server-Sent Events; the service going away or silent raises its 503 / 504 error, as does an
        answer that is no event stream (a proxy's page sent with 200): the service failing, not the gateway."""
        if not _is_event_stream(self):
            log.warning("upstream answered a stream request with something else",
                        extra={"upstream": self.name, "content_type": self.headers.get("Content-Type")})
            raise DependencyUnavailable(self.name, f"{self.name} is unavailable: its answer could not be read")
        try:
            async for event in EventSource(self).aiter_sse():  # type: ignore[arg-type]  # reads headers, aiter_text
                yield event
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _failure(self.name, exc) from exc

    async def aread(self) -> bytes:
        try:
            return await self._response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _failure(self.name, exc) from exc

    async def aclose(self) -> None:
        self._response.close()  # after the whole body this is a no-op: the connection went back to the pool


class Upstream:
    def __init__(self, *, name: str, session: aiohttp.ClientSession, replicas: ReplicaPool) -> None:
        self.name = name
        self.replicas = replicas
        self._session = session

    async def forward(
        self,
        *,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None = None,
        params: list[tuple[str, str]] | None = None,
        timeout_s: float | None = None,
        repeatable: bool | None = None,
    ) -> Response:
        """Send and pass the answer on whole; `timeout_s`, when given, replaces the session's timeout.

        A request that changes nothing (`repeatable`: a GET unless told otherwise) and failed on the replica it
        reached, by a lost connection, no answer in time or a 502, 503 or 504, is sent once more to another
        replica, when there is one; a replica that did not answer in time is skipped for a while, as one that
        refuses connections is. Otherwise the request is sent once, as every request that may change something."""
        if repeatable is None:
            repeatable = method in ("GET", "HEAD")
        reached: list[str] = []
        if not repeatable or len(self.replicas.urls) < 2:
            return await self._answer(method, path, headers, body, params, timeout_s, reached=reached)
        first: Response | ServiceError
        try:
            response = await self._answer(method, path, headers, body, params, timeout_s, reached=reached)
            if response.status_code not in _REPLICA_FAILING:
                return response
            first, failure = response, f"answered {response.status_code}"
        except (ConnectionLost, UpstreamTimeout) as exc:
            first, failure = exc, exc.code
        except DependencyUnavailable as exc:  # an error not in Cairn's shape, or the service token refused
            if isinstance(exc, NotDelivered):
                raise  # every replica refused the connection: none to turn to
            first, failure = exc, exc.code
        if set(self.replicas.urls) - set(reached):
            log.warning("replica failed a request that changes nothing; sending it to another",
                        extra={"upstream": self.name, "url": reached[-1], "failure": failure})
            try:
                return await self._answer(method, path, headers, body, params, timeout_s, reached=reached)
            except NotDelivered:
                pass  # the others refused the connection: the first answer stands
        if isinstance(first, Response):
            return first
        raise first

    async def _answer(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None,
        params: list[tuple[str, str]] | None,
        timeout_s: float | None,
        *,
        reached: list[str],
    ) -> Response:
        """The answer of a replica not in `reached`, which then lists it too."""
        try:
            response = await self._send(method, path, headers, body, params, timeout_s, reached=reached)
            return await self.read_whole(UpstreamStream(name=self.name, response=response))
        except UpstreamTimeout:
            self.replicas.mark_unreachable(reached[-1])  # silent for a whole timeout: let the others take the load
            raise

    async def forward_stream(
        self,
        *,
        route: str,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None = None,
        params: list[tuple[str, str]] | None = None,
        on_lost: Callable[[], None] | None = None,
    ) -> Response:
        """Send and pass the answer on as it arrives (Server-Sent Events, a CSV file), unbuffered.

        An error answer (not 200) is read whole and returned as is. The upstream response is closed
        when the stream ends or the client goes away, so the service behind stops its work too.
        A stream the service cuts off is counted as a failure of the gateway's `route`; `on_lost` is called
        when the connection broke (ConnectionLost), not when the service went silent.
        """
        upstream = await self.open_stream(method=method, path=path, headers=headers, body=body, params=params)
        if upstream.status_code != 200:
            return await self.read_whole(upstream)
        return StreamingResponse(
            self._relay(upstream, route=route, on_lost=on_lost),
            status_code=200,
            headers=_passed(upstream),
            background=BackgroundTask(upstream.aclose),
        )

    async def open_stream(
        self,
        *,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None = None,
        params: list[tuple[str, str]] | None = None,
        timeout_s: float | None = None,
    ) -> UpstreamStream:
        """Send and return the response with its body unread; the caller must aclose() it."""
        response = await self._send(method, path, headers, body, params, timeout_s)
        return UpstreamStream(name=self.name, response=response)

    async def read_whole(self, upstream: UpstreamStream) -> Response:
        """The response passed on whole (an answer, or the error that came instead of a stream), and closed."""
        try:
            content = await upstream.aread()
        finally:
            await upstream.aclose()
        if upstream.status_code == 401:
            # Internal services answer 401 only to a wrong service token; passed on, it would tell the client
            # that its own bearer token is bad, and the web page would sign the user out.
            log.error("upstream refused the service token; CAIRN_SERVICE_TOKEN differs", extra={"upstream": self.name})
            raise DependencyUnavailable(self.name, f"{self.name} refused the gateway's service token")
        if upstream.status_code >= 400 and not _is_cairn_error(upstream, content):
            return self._own_error(upstream, content)
        return Response(content=content, status_code=upstream.status_code, headers=_passed(upstream))

    def _own_error(self, upstream: UpstreamStream, content: bytes) -> Response:
        """An error not in Cairn's shape (a proxy's HTML page, a framework's default body with a traceback)
        replaced by one naming the service: its body may hold internal addresses, paths or tracebacks."""
        status = upstream.status_code
        snippet = content[:200].decode("utf-8", "replace")
        log.warning("upstream answered an error not in Cairn's shape",
                    extra={"upstream": self.name, "status": status, "body": snippet})
        if status == 504:
            raise UpstreamTimeout(self.name)
        if status >= 500:
            raise DependencyUnavailable(
                self.name,
                f"{self.name} is unavailable: it answered {status}",
                retry_after=upstream.headers.get("Retry-After"),
            )
        body = {"error": _CLIENT_ERROR_CODES.get(status, "http_error"), "message": f"{self.name} answered {status}"}
        headers = {k: v for k, v in _passed(upstream).items() if k.lower() != "content-type"}
        return JSONResponse(body, status_code=status, headers=headers)

    async def _relay(
        self, upstream: UpstreamStream, *, route: str, on_lost: Callable[[], None] | None
    ) -> AsyncIterator[bytes]:
        # The service's own `error` events pass through uncounted here: the service counts them.
        events = _is_event_stream(upstream)
        # An event stream goes on in whole events: a part of an event the service never finished would reach
        # the client cut short (a `token` whose JSON breaks off), dispatched by the error event's blank line.
        held = bytearray()
        try:
            async for chunk in upstream.aiter_raw():
                if not events:
                    yield chunk
                    continue
                searched_from = max(len(held) - 3, 0)  # a blank line may straddle two chunks
                held += chunk
                if (end := _end_of_last_event(held, searched_from)) > 0:
                    yield bytes(held[:end])
                    del held[:end]
            if held:  # the stream ended without the last event's blank line: passed on as the service sent it
                yield bytes(held)
        except (aiohttp.ClientError, TimeoutError) as exc:  # the service went away or went silent mid-stream
            failure = _failure(self.name, exc)
            count_stream_failure(service="gateway", route=route, reason=failure.code)
            if on_lost is not None and isinstance(failure, ConnectionLost):
                on_lost()
            if not events:
                raise  # too late for an error status: the connection is dropped, so the client sees the body cut short
            yield format_sse_event(event="error", data_str=json.dumps(failure.event_data()))  # `held` is dropped
        finally:
            await upstream.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes | None,
        params: list[tuple[str, str]] | None,
        timeout_s: float | None = None,
        *,
        reached: list[str] | None = None,
    ) -> aiohttp.ClientResponse:
        """The response (body unread) of the next replica not in `reached`; a refused connection tries the next
        replica. The replica the request reaches is added to `reached`."""
        query = f"?{urlencode(params)}" if params else ""
        timeout = {} if timeout_s is None else {"timeout": client_timeout(timeout_s)}

        async def send(url: str) -> aiohttp.ClientResponse:
            if reached is not None:
                reached.append(url)
            target = URL(f"{url}{path}{query}", encoded=True)  # the path is quoted already; yarl would requote
            with client_span(f"{self.name} {method}", headers, {"server.address": url, "url.path": path}):
                return await self._session.request(
                    method, target, data=body, headers=headers, skip_auto_headers=_NO_GUESSED_TYPE, **timeout
                )

        try:
            return await on_a_replica(self.replicas, send, avoid=tuple(reached or ()))
        except NoReplicaConnected as exc:
            raise NotDelivered(self.name) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _failure(self.name, exc) from exc

    async def health(self, *, service_token: str) -> ReplicasHealth:
        """Which replicas answer /healthz, and which of them refuse `service_token`."""
        return await probe_replicas(self._session, self.replicas, timeout_s=2, service_token=service_token)


def _is_cairn_error(upstream: UpstreamStream, content: bytes) -> bool:
    """Whether an error answer is a Cairn service's own: a JSON object with a string `error` and `message`."""
    if not is_json_type(upstream.headers.get("Content-Type", "")):
        return False
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), str) and isinstance(body.get("message"), str)


# A blank line, which ends an event: two line ends, each CRLF, CR or LF.
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")


def _end_of_last_event(data: bytearray, start: int) -> int:
    """Where the last whole event in `data` ends (0: none has), looking from `start` on."""
    end = 0
    for match in _EVENT_END.finditer(data, start):
        end = match.end()
    return end


def _is_event_stream(upstream: UpstreamStream) -> bool:
    return upstream.headers.get("Content-Type", "").startswith("text/event-stream")


def _passed(upstream: UpstreamStream) -> dict[str, str]:
    named = {name.strip().lower() for value in upstream.headers.getall("Connection", []) for name in value.split(",")}
    return {
        k: v for k, v in upstream.headers.items() if k.lower() not in _DROPPED | named and k.lower() != "x-request-id"
    }


def client_timeout(timeout_s: float) -> aiohttp.ClientTimeout:
    """`timeout_s` bounds the wait for a connection and each wait for bytes, not the whole exchange, so a long
    answer streams for as long as it keeps sending; connecting to a replica has its own CONNECT_TIMEOUT_S."""
    return aiohttp.ClientTimeout(total=None, connect=timeout_s, sock_connect=CONNECT_TIMEOUT_S, sock_read=timeout_s)


def open_session(*, timeout_s: float, reuse_connections: bool = True) -> aiohttp.ClientSession:
    """A session for upstreams, each request bounded by client_timeout(`timeout_s`) unless it brings its own.

    Without `reuse_connections`, every request opens its own connection: a request to a replica that has
    just died is then refused and goes to another replica, where on a kept-alive connection it would fail
    as if it had been in flight there (it cannot be resent: a POST may have done its work). A connection
    kept is dropped after CLIENT_KEEP_ALIVE_S idle, before the service would close it (shared.web)."""
    # No cap on connections (limit=0): each request in hand holds at most one, and a capped pool made a
    # request wait for a free connection under the connect timeout, whose expiry counted as a replica
    # refusing: healthy chat replicas were skipped whenever 200 answers were streaming.
    kept = {"keepalive_timeout": CLIENT_KEEP_ALIVE_S} if reuse_connections else {"force_close": True}
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, **kept),
        timeout=client_timeout(timeout_s),
    )
