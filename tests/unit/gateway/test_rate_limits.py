import ipaddress

import pytest

from services.gateway import rate_limits
from services.gateway.rate_limits import Limit, LoginLimits, RateLimited, client_address, parse_networks
from tests.unit.gateway.fakes import FakeRateLimiter

pytestmark = pytest.mark.unit


LIMITS = LoginLimits(per_username=Limit(3, 60), per_address=Limit(5, 60))


async def _fail(limiter, username="ann", address="192.0.2.1"):
    attempt = await rate_limits.start_login(limiter=limiter, limits=LIMITS, username=username, address=address)
    await rate_limits.login_failed(limiter=limiter, attempt=attempt)


async def test_failed_logins_per_username_are_limited_for_the_window_then_allowed():
    limiter = FakeRateLimiter()
    for _ in range(3):
        await _fail(limiter)
        limiter.now += 10
    with pytest.raises(RateLimited) as refused:
        await _fail(limiter)
    assert refused.value.status_code == 429 and refused.value.code == "rate_limited"
    assert refused.value.retry_after_s == 30  # the first failure (t=0) leaves the window at t=60; now t=30
    assert refused.value.headers() == {"Retry-After": "30"}
    assert refused.value.body()["retry_after_s"] == 30

    limiter.now += 25  # refused attempts are not counted: the lock does not grow
    with pytest.raises(RateLimited):
        await _fail(limiter)
    limiter.now += 5
    await _fail(limiter)  # the oldest failure has left the window


async def test_usernames_are_counted_without_case_or_spaces_and_stored_hashed():
    limiter = FakeRateLimiter()
    for name in ("Ann", " ann", "ANN"):
        await _fail(limiter, username=name)
    with pytest.raises(RateLimited):
        await _fail(limiter, username="ann")
    assert not any("ann" in key.lower().split(":")[-1] for key in limiter.events)


async def test_a_successful_login_uses_up_no_limit():
    limiter = FakeRateLimiter()
    for _ in range(10):
        attempt = await rate_limits.start_login(limiter=limiter, limits=LIMITS, username="ann", address="192.0.2.1")
        await rate_limits.login_succeeded(limiter=limiter, attempt=attempt)
    assert all(not times for times in limiter.events.values())


async def test_attempts_under_way_fill_a_bucket_for_a_second_failures_for_the_window():
    limiter = FakeRateLimiter()
    start = rate_limits.start_login
    under_way = [await start(limiter=limiter, limits=LIMITS, username="ann", address="192.0.2.1") for _ in range(3)]
    with pytest.raises(RateLimited) as refused:  # no password checked yet: they may all be right
        await _fail(limiter)
    assert refused.value.retry_after_s == 1 and "at once" in refused.value.message

    await rate_limits.login_succeeded(limiter=limiter, attempt=under_way[0])
    await _fail(limiter)
    for attempt in under_way[1:]:
        await rate_limits.login_failed(limiter=limiter, attempt=attempt)
    limiter.now += 10
    with pytest.raises(RateLimited) as refused:
        await _fail(limiter)
    assert refused.value.retry_after_s == 50  # three failures hold the bucket until the oldest leaves


async def test_an_attempt_never_settled_is_taken_for_a_failure_in_the_end():
    limiter = FakeRateLimiter()
    limits = LoginLimits(per_username=Limit(3, 300), per_address=Limit(0, 60))

    async def attempt() -> rate_limits.LoginAttempt:
        return await rate_limits.start_login(limiter=limiter, limits=limits, username="ann", address="192.0.2.1")

    await attempt()  # never settled nor given back: its gateway stopped
    for _ in range(2):
        await rate_limits.login_failed(limiter=limiter, attempt=await attempt())
    with pytest.raises(RateLimited) as refused:
        await attempt()
    assert refused.value.retry_after_s == 1
    limiter.now += rate_limits.UNDER_WAY_AT_MOST_S
    with pytest.raises(RateLimited) as refused:
        await attempt()
    assert refused.value.retry_after_s == 300 - rate_limits.UNDER_WAY_AT_MOST_S


async def test_failures_per_address_are_limited_across_usernames():
    limiter = FakeRateLimiter()
    for n in range(5):
        await _fail(limiter, username=f"user{n}")
    with pytest.raises(RateLimited):
        await _fail(limiter, username="someone-else")
    await _fail(limiter, username="someone-else", address="192.0.2.2")


async def test_an_ipv6_network_of_one_host_is_one_address_and_an_ipv4_address_written_as_ipv6_is_itself():
    limiter = FakeRateLimiter()
    for n in range(5):  # a host can use any address of its /64
        await _fail(limiter, username=f"user{n}", address=f"2001:db8:0:7::{n + 1}")
    with pytest.raises(RateLimited):
        await _fail(limiter, username="someone", address="2001:db8:0:7:abcd::1")
    await _fail(limiter, username="someone", address="2001:db8:0:8::1")  # another network
    for n in range(5):
        await _fail(limiter, username=f"user{n}", address="::ffff:192.0.2.77")
    with pytest.raises(RateLimited):
        await _fail(limiter, username="someone", address="192.0.2.77")
    await _fail(limiter, username="someone", address="::ffff:192.0.2.78")  # not one bucket for every IPv4 client


async def test_a_refused_attempt_is_counted_in_no_bucket():
    limiter = FakeRateLimiter()
    for n in range(5):
        await _fail(limiter, username=f"user{n}")
    with pytest.raises(RateLimited):
        await _fail(limiter, username="bob")  # the address is full: bob's own bucket must stay empty
    for _ in range(3):
        await _fail(limiter, username="bob", address="198.51.100.7")


async def test_a_limit_of_zero_is_off():
    limiter = FakeRateLimiter()
    limits = LoginLimits(per_username=Limit(0, 60), per_address=Limit(0, 60))
    for _ in range(50):
        await rate_limits.start_login(limiter=limiter, limits=limits, username="ann", address="192.0.2.1")
        await rate_limits.count_chat_request(limiter=limiter, limit=Limit(0, 60), user_id="u1")
        await rate_limits.count_rating(limiter=limiter, limit=Limit(0, 60), user_id="u1")
    assert limiter.events == {}


@pytest.mark.parametrize(
    ("count", "other", "what"),
    [
        (rate_limits.count_chat_request, rate_limits.count_rating, "questions"),
        (rate_limits.count_rating, rate_limits.count_chat_request, "ratings"),
    ],
    ids=["questions", "ratings"],
)
async def test_questions_and_ratings_are_limited_per_user_each_apart(count, other, what):
    limiter = FakeRateLimiter()
    limit = Limit(2, 60)
    for _ in range(2):
        await count(limiter=limiter, limit=limit, user_id="u1")
    with pytest.raises(RateLimited) as refused:
        await count(limiter=limiter, limit=limit, user_id="u1")
    assert refused.value.retry_after_s == 60 and f"2 {what} per 60 s" in refused.value.message
    await count(limiter=limiter, limit=limit, user_id="u2")
    await other(limiter=limiter, limit=limit, user_id="u1")


@pytest.mark.parametrize("events, window", [(-1, 60), (5, 0), (5, -1)])
def test_a_limit_checks_its_arguments(events, window):
    with pytest.raises(ValueError):
        Limit(events, window)


def test_retry_after_is_whole_seconds_and_at_least_one():
    assert RateLimited("x", retry_after_s=0.001).retry_after_s == 1
    assert RateLimited("x", retry_after_s=2.2).retry_after_s == 3


TRUSTED = parse_networks(["10.0.0.0/8", "::1"])


@pytest.mark.parametrize(
    "peer, forwarded, expected",
    [
        ("192.0.2.9", None, "192.0.2.9"),  # no proxy
        ("192.0.2.9", "203.0.113.5", "192.0.2.9"),  # an untrusted peer cannot name someone else
        ("10.1.2.3", "203.0.113.5", "203.0.113.5"),  # a trusted proxy names the client
        ("10.1.2.3", "6.6.6.6, 203.0.113.5", "203.0.113.5"),  # the left part is the client's to forge
        ("10.1.2.3", "203.0.113.5, 10.9.9.9", "203.0.113.5"),  # two trusted proxies in a row
        ("10.1.2.3", "10.2.2.2, 10.9.9.9", "10.2.2.2"),  # all trusted: the farthest one
        ("10.1.2.3", "203.0.113.5:4711", "203.0.113.5"),  # a port some proxies add
        ("10.1.2.3", "[2001:db8::1]:4711", "2001:db8::1"),
        ("10.1.2.3", "garbage", "10.1.2.3"),  # not an address: stop at the last trusted hop
        ("10.1.2.3", None, "10.1.2.3"),
        ("::1", "2001:db8::7", "2001:db8::7"),
        ("::ffff:10.1.2.3", "203.0.113.5", "203.0.113.5"),  # an IPv4 proxy as a dual-stack socket shows it
        ("10.1.2.3", "::ffff:203.0.113.5", "203.0.113.5"),
        ("testclient", "203.0.113.5", "testclient"),  # not an address at all (test clients)
        (None, None, "unknown"),
    ],
)
def test_client_address(peer, forwarded, expected):
    assert client_address(peer=peer, forwarded_for=forwarded, trusted=TRUSTED) == expected


def test_trusted_proxies_must_be_addresses_or_ranges():
    assert parse_networks([" 10.0.0.0/8 ", "", "127.0.0.1"]) == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("127.0.0.1/32"),
    )
    with pytest.raises(ValueError):
        parse_networks(["proxy.internal"])
