"""Rate limits: failed logins per username and per client address (an IPv6 client's /64), chat requests and
ratings per user.

Counts live in a shared store (Redis), so every gateway replica sees the same numbers, as a sliding
window: at most `events` in any `window_s` seconds.

Logins: every attempt is counted in both buckets before the password is checked, atomically, so a
burst of parallel guesses gets no more than the limit through; a successful attempt is then given
back, so only failures use up the budget and many people behind one address (an office, a NAT) can
all log in. So is an attempt the store cut short (a 503): it is no wrong password. While a bucket is
full no password is checked at all: a guess made then says nothing, even a right one. An attempt is
counted as under way until it is given back or settled as a failure: a bucket full of attempts under
way is told to retry in UNDER_WAY_WAIT_S, since they free it as soon as they succeed, where one full of
failures is told to wait until the oldest leaves the window.

Lock-out abuse: anyone may fail logins on anyone's username, so the per-username limit lets an
attacker lock an account out. The lock is bounded: refused attempts are not counted, so it ends
`window_s` after the oldest failure in the window, and keeping it up costs the attacker `events`
fresh failures per window, which in turn eat their own per-address budget. We accept that bounded
lock-out rather than letting a correct password through a full bucket (which would make the
per-username limit useless against a guesser spread over many addresses).
"""
from __future__ import annotations

import hashlib
import ipaddress
import math
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.errors import DependencyUnavailable, ServiceError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Limit:
    """At most `events` in any `window_s` seconds; `events == 0` means no limit."""

    events: int
    window_s: float

    def __post_init__(self) -> None:
        if self.events < 0 or self.window_s <= 0:
            raise ValueError(f"a rate limit needs events >= 0 and window_s > 0; got {self.events} per {self.window_s}s")

    @property
    def enabled(self) -> bool:
        return self.events > 0


@dataclass(frozen=True)
class Bucket:
    key: str
    limit: Limit


# A login's password check takes a fraction of a second, a few seconds in a burst: the wait given while logins
# under way fill a bucket. One whose outcome was never recorded (its gateway stopped meanwhile) is taken for a
# failure once UNDER_WAY_AT_MOST_S old. Either number only sets Retry-After: every attempt counts all along.
UNDER_WAY_WAIT_S = 1.0
UNDER_WAY_AT_MOST_S = 60.0


class RateLimiter(Protocol):
    """Sliding-window counters shared by every replica. Methods raise DependencyUnavailable when the
    store does not answer: callers let it through, so nothing passes unchecked (fail closed)."""

    async def take(self, buckets: Sequence[Bucket], *, event_id: str, under_way: bool = False) -> float:
        """Count the event `event_id` in every bucket if each has room in its window, and return 0.
        Otherwise count it nowhere and return the seconds until every bucket has room again, taking the
        events under way to leave within UNDER_WAY_WAIT_S. `under_way`: the event is an attempt whose
        outcome is not known yet; it counts as any other until it is settled or given back."""

    async def settle(self, keys: Sequence[str], *, event_id: str) -> None:
        """Keep the event `event_id`, counted under way, as a settled one (a failed login)."""

    async def give_back(self, keys: Sequence[str], *, event_id: str) -> None:
        """Forget the event `event_id` in these buckets, as if it had never been counted."""


class RateLimited(ServiceError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, math.ceil(retry_after_s))

    def body(self) -> dict:
        return {**super().body(), "retry_after_s": self.retry_after_s}

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(self.retry_after_s)}


@dataclass(frozen=True)
class LoginLimits:
    per_username: Limit
    per_address: Limit


@dataclass(frozen=True)
class LoginAttempt:
    """A counted login attempt: give it back with `login_succeeded` when the password was right."""

    keys: tuple[str, ...]
    event_id: str


def _username_key(username: str) -> str:
    # Hashed: what people type as a username (sometimes their password) is not kept in Redis as is.
    return "login:user:" + hashlib.sha256(username.strip().casefold().encode()).hexdigest()[:32]


def _address_key(address: str) -> str:
    # An IPv6 host is given a whole /64 (a home, a phone, a rented server) and may use any address in it,
    # a new one per attempt if it likes: counting each address alone would give it a fresh budget each time.
    ip = _address(address)
    if ip is None:  # no address at all (test clients)
        return f"login:ip:{address}"
    if ip.version == 6:
        return f"login:ip:{ipaddress.ip_network((ip, 64), strict=False)}"
    return f"login:ip:{ip}"


async def start_login(*, limiter: RateLimiter, limits: LoginLimits, username: str, address: str) -> LoginAttempt:
    """Count a login attempt before its password is checked; RateLimited while either bucket is full."""
    buckets = [
        Bucket(key, limit)
        for key, limit in ((_username_key(username), limits.per_username), (_address_key(address), limits.per_address))
        if limit.enabled
    ]
    attempt = LoginAttempt(keys=tuple(b.key for b in buckets), event_id=secrets.token_hex(8))
    if buckets and (wait_s := await limiter.take(buckets, event_id=attempt.event_id, under_way=True)) > 0:
        raise RateLimited("too many failed logins, or too many at once; try again later", retry_after_s=wait_s)
    return attempt


async def login_failed(*, limiter: RateLimiter, attempt: LoginAttempt) -> None:
    """Keep the attempt counted as a failure. Best effort: while the store fails, the attempt stays counted
    under way, and is taken for a failure once UNDER_WAY_AT_MOST_S old."""
    if not attempt.keys:
        return
    try:
        await limiter.settle(attempt.keys, event_id=attempt.event_id)
    except DependencyUnavailable:
        pass


async def login_succeeded(*, limiter: RateLimiter, attempt: LoginAttempt) -> None:
    if attempt.keys:
        await limiter.give_back(attempt.keys, event_id=attempt.event_id)


async def login_cut_short(*, limiter: RateLimiter, attempt: LoginAttempt) -> None:
    """Give back an attempt the session store failed: it failed before the password was checked or after a
    right one, so it is no failed login. Best effort: while the store still fails, the count stays."""
    try:
        await login_succeeded(limiter=limiter, attempt=attempt)
    except DependencyUnavailable:
        pass


def _chat_key(user_id: str) -> str:
    return f"chat:user:{user_id}"


def _rating_key(user_id: str) -> str:
    return f"feedback:user:{user_id}"


async def _count(limiter: RateLimiter, bucket: Bucket, *, what: str) -> str:
    event_id = secrets.token_hex(8)
    wait_s = await limiter.take([bucket], event_id=event_id)
    if wait_s > 0:
        message = f"at most {bucket.limit.events} {what} per {bucket.limit.window_s:g} s; try again later"
        raise RateLimited(message, retry_after_s=wait_s)
    return event_id


async def count_chat_request(*, limiter: RateLimiter, limit: Limit, user_id: str) -> str | None:
    """Count one question of the user and return its event id (None when there is no limit);
    RateLimited when the user has asked `limit.events` in the window."""
    if not limit.enabled:
        return None
    return await _count(limiter, Bucket(_chat_key(user_id), limit), what="questions")


async def count_rating(*, limiter: RateLimiter, limit: Limit, user_id: str) -> None:
    """Count one rating by the user; RateLimited when the user has rated `limit.events` times in the window.
    Each rating is a row in analytics, rating the same answer again too, so this bounds what one user can add."""
    if limit.enabled:
        await _count(limiter, Bucket(_rating_key(user_id), limit), what="ratings")


async def give_back_chat_request(*, limiter: RateLimiter, user_id: str, event_id: str | None) -> None:
    """Forget a question counted by count_chat_request, as if it had never been asked."""
    if event_id is not None:
        await limiter.give_back([_chat_key(user_id)], event_id=event_id)


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Addresses or CIDR ranges (`10.0.0.0/8`, `127.0.0.1`, `::1`); ValueError on anything else."""
    return tuple(ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip())


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("["):  # [v6]:port
        text = text[1 : text.find("]")] if "]" in text else text
    elif text.count(":") == 1:  # v4:port
        text = text.split(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    # An IPv4 peer as a dual-stack socket shows it (::ffff:a.b.c.d) is that IPv4 address, in TRUSTED_PROXIES too.
    return getattr(address, "ipv4_mapped", None) or address


def client_address(*, peer: str | None, forwarded_for: str | None, trusted: Sequence[IPNetwork]) -> str:
    """Who is asking: the socket peer, unless the peer is a trusted proxy; then the right-most
    X-Forwarded-For address that is not itself a trusted proxy (the left part is the client's to forge).
    An entry that is not an address stops the walk at the last trusted hop."""
    peer_ip = _address(peer or "")
    if peer_ip is None:
        return peer or "unknown"
    current = peer_ip
    if forwarded_for:
        for entry in reversed(forwarded_for.split(",")):
            if not any(current in net for net in trusted):
                break
            hop = _address(entry)
            if hop is None:
                break
            current = hop
    return str(current)
