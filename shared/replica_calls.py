"""Calling one of a service's replicas over aiohttp: the refused-connection failover and the health probe
(with the service-token check that readiness reports) that the gateway's proxying and chat's retrieval
client share.

A request whose connection was refused (or never opened in time) never left, so it goes at once to one
other replica; a request that reached a replica is never sent again, since a POST may have done its work.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

import aiohttp

from shared.replicas import ReplicaPool
from shared.web import SERVICE_TOKEN_HEADER, token_verdict

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


async def on_a_replica(
    replicas: ReplicaPool, send: Callable[[str], Awaitable[T]], *, avoid: Collection[str] = ()
) -> T:
    """`send(url)` on the next replica not in `avoid`; when its connection is refused, on the next one, until one
    takes the request or each has refused it (a refused request never left, so sending it again is safe). Two
    retries were not enough: with two of three replicas down, their skip periods end together now and then, and
    a request tried on both of them alone failed while the third could have answered."""
    refused: list[str] = []
    while url := replicas.pick(exclude=[*avoid, *refused]):
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


@dataclass(frozen=True)
class ReplicasHealth:
    """What one round of /healthz probes, each presenting the caller's service token, found."""

    answered: int  # replicas that answered
    refusing: tuple[str, ...]  # those of them that said the caller's service token is not theirs

    @property
    def token_accepted(self) -> bool:
        """False when every replica that answered refused the token: the caller's CAIRN_SERVICE_TOKEN is the
        one that differs, and each of its requests to the service would fail. Some replicas refusing
        among others is their own misconfiguration; the caller stays ready for the ones that accept it."""
        return not self.answered or len(self.refusing) < self.answered

    def checks(self, name: str) -> dict[str, bool]:
        """/readyz checks: `name` answers, and `name_service_token` (the token is not refused)."""
        return {name: self.answered > 0, f"{name}_service_token": self.token_accepted}


async def probe_replicas(
    session: aiohttp.ClientSession, replicas: ReplicaPool, *, timeout_s: float, service_token: str
) -> ReplicasHealth:
    """Ask every replica's /healthz at once, presenting `service_token`."""

    async def healthz(url: str) -> bool | None:
        """None: no answer; else whether the replica accepts the token (True when it does not say)."""
        try:
            async with session.get(
                f"{url}/healthz",
                headers={SERVICE_TOKEN_HEADER: service_token},
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                if response.status != 200:
                    return None
                return token_verdict(await response.json(content_type=None)) is not False
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    verdicts = dict(zip(replicas.urls, await asyncio.gather(*(healthz(url) for url in replicas.urls)), strict=True))
    health = ReplicasHealth(
        answered=sum(v is not None for v in verdicts.values()),
        refusing=tuple(url for url, v in verdicts.items() if v is False),
    )
    if health.refusing:
        log.error(
            "replicas refuse the service token; CAIRN_SERVICE_TOKEN differs",
            extra={"upstream": replicas.service, "refusing": ",".join(health.refusing)},
        )
    return health
