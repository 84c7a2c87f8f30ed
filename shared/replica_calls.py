"""Calling one of a service's replicas over aiohttp: the refused-connection failover and the health probe
that the gateway's proxying and chat's retrieval client share.

A request whose connection was refused (or never opened in time) never left, so it goes at once to one
other replica; a request that reached a replica is never sent again, since a POST may have done its work.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp

from shared.replicas import ReplicaPool

log = logging.getLogger(__name__)

T = TypeVar("T")

# Failures before the request left: safe to send it to another replica.
NOT_CONNECTED = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
CONNECT_TIMEOUT_S = 3.0


class NoReplicaConnected(Exception):
    """Every replica tried refused the connection."""

    def __init__(self, refused: list[str]) -> None:
        super().__init__(f"no connection to {', '.join(refused) or 'any replica'}")
        self.refused = refused


async def on_a_replica(replicas: ReplicaPool, send: Callable[[str], Awaitable[T]]) -> T:
    """`send(url)` on the next replica; when its connection is refused, on the next one, until one takes the
    request or each has refused it (a refused request never left, so sending it again is safe). Two retries
    were not enough: with two of three replicas down, their skip periods end together now and then, and
    a request tried on both of them alone failed while the third could have answered."""
    refused: list[str] = []
    while url := replicas.pick(exclude=refused):
        try:
            result = await send(url)
        except NOT_CONNECTED as exc:
            replicas.mark_unreachable(url)
            refused.append(url)
            log.warning(
                "replica refused the connection", extra={"upstream": replicas.service, "url": url, "error": repr(exc)}
            )
            continue
        replicas.mark_reachable(url)
        return result
    raise NoReplicaConnected(refused)


async def some_replica_healthy(session: aiohttp.ClientSession, replicas: ReplicaPool, *, timeout_s: float) -> bool:
    """Whether any replica answers /healthz."""

    async def healthz(url: str) -> bool:
        try:
            async with session.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    return any(await asyncio.gather(*(healthz(url) for url in replicas.urls)))
