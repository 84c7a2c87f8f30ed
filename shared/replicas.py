"""A service's replicas: the URL-list setting, and round robin with passive health.

A replica that refused a connection is skipped for a cool-down that doubles with each refusal in a row
(up to a cap) and resets once it answers again. When every replica is cooling down the pool still
picks one: a request that would fail anyway may as well find the first replica that is back.
The pool knows nothing of HTTP; the clients tell it which replica failed to connect.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated

from prometheus_client import Counter
from pydantic import AfterValidator, BeforeValidator
from pydantic_settings import NoDecode

from shared.urls import checked_http_url

UNREACHABLE = Counter(
    "cairn_upstream_unreachable_total",
    "Connections to a replica that failed, or searches it left unanswered too long; it is then skipped for a while",
    ["service", "upstream"],
)


def _split(value: object) -> object:
    """`http://a:1, http://b:1/` -> ("http://a:1", "http://b:1"); lists pass through the same way."""
    parts = value.split(",") if isinstance(value, str) else value
    if isinstance(parts, Iterable):
        return tuple(str(part).strip().rstrip("/") for part in parts if str(part).strip())
    return value


def _http_urls(urls: tuple[str, ...]) -> tuple[str, ...]:
    if not urls:
        raise ValueError("name at least one URL")
    for url in urls:
        checked_http_url(url)
    return urls


# A settings field of one or more base URLs, given in the environment as a comma-separated list.
UrlList = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_split), AfterValidator(_http_urls)]


@dataclass
class _Health:
    failures: int = 0
    skip_until: float = 0.0


class ReplicaPool:
    def __init__(
        self,
        *,
        service: str,
        urls: Sequence[str],
        cooldown_s: float = 2.0,
        max_cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not urls:
            raise ValueError(f"{service} needs at least one URL")
        if cooldown_s <= 0 or max_cooldown_s < cooldown_s:
            raise ValueError("cooldown_s must be positive and max_cooldown_s at least cooldown_s")
        self.service = service
        self.urls = tuple(url.rstrip("/") for url in urls)
        self._cooldown = cooldown_s
        self._max_cooldown = max_cooldown_s
        self._clock = clock
        self._health = {url: _Health() for url in self.urls}
        self._next = 0

    def pick(self, *, exclude: Iterable[str] = ()) -> str | None:
        """The next replica in turn that is not cooling down (any next one if all are); None if all are excluded."""
        excluded = set(exclude)
        order = [self.urls[(self._next + i) % len(self.urls)] for i in range(len(self.urls))]
        candidates = [url for url in order if url not in excluded]
        if not candidates:
            return None
        now = self._clock()
        chosen = next((url for url in candidates if self._health[url].skip_until <= now), candidates[0])
        self._next = (self.urls.index(chosen) + 1) % len(self.urls)
        return chosen

    def mark_unreachable(self, url: str) -> None:
        health = self._health[url]
        health.failures += 1
        cooldown = min(self._cooldown * 2 ** (health.failures - 1), self._max_cooldown)
        health.skip_until = self._clock() + cooldown
        UNREACHABLE.labels(self.service, url).inc()

    def mark_reachable(self, url: str) -> None:
        health = self._health[url]
        health.failures, health.skip_until = 0, 0.0

    def reachable(self, url: str) -> bool:
        """Whether `url` is not cooling down now."""
        return self._health[url].skip_until <= self._clock()
