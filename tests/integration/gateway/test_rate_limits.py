"""Rate limits against the real Redis: brute-force logins, chat requests, and two gateways sharing the counts."""
import asyncio
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from services.gateway.adapters.redis_rate_limits import RedisRateLimiter
from services.gateway.adapters.redis_store import connect
from services.gateway.main import create_app
from services.gateway.rate_limits import Bucket, Limit
from services.gateway.settings import Settings
from tests.integration.gateway.chat_stand_in import PASSWORD, chat_stand_in, gateway_settings, login
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def chat_url():
    with serve_in_thread(chat_stand_in()) as url:
        yield url


@pytest.fixture
def settings(redis_url, unique, chat_url):
    return gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url)


def _bad_login(client, username="ann", **kwargs):
    return client.post("/auth/login", json={"username": username, "password": "wrong password"}, **kwargs)


def test_brute_force_on_a_username_is_429_until_the_window_has_passed(settings):
    settings = settings.model_copy(update={"login_attempts_per_username": 3, "login_window_s": 1.5})
    with TestClient(create_app(settings)) as client:
        assert [_bad_login(client).status_code for _ in range(3)] == [401, 401, 401]
        refused = _bad_login(client)
        assert refused.status_code == 429
        assert refused.json()["error"] == "rate_limited" and refused.json()["retry_after_s"] in (1, 2)
        assert refused.headers["retry-after"] in ("1", "2")
        # While the username is locked even the right password is refused: a guess then tells nothing.
        right = client.post("/auth/login", json={"username": "ann", "password": PASSWORD})
        assert right.status_code == 429
        assert login(client, "bob")  # other usernames are not affected

        time.sleep(1.6)
        assert login(client, "ann")


def test_successful_logins_use_up_no_limit(settings):
    settings = settings.model_copy(update={"login_attempts_per_username": 2, "login_attempts_per_ip": 2})
    with TestClient(create_app(settings)) as client:
        for _ in range(5):
            login(client, "ann")
        assert _bad_login(client).status_code == 401


@pytest.mark.production_password_cost  # the password checks of the first two are under way as the others come
async def test_right_passwords_sent_at_once_beyond_the_limit_wait_a_second_not_the_window(settings):
    """A login counts while its password is checked, so that parallel guesses get no more than the limit
    through. Right passwords sent at the same moment beyond the limit are refused too, but no failure was
    counted: they are told to try again in a second, not when the window has passed, and then get in."""
    settings = settings.model_copy(update={"login_attempts_per_username": 2, "login_window_s": 300})
    right = {"username": "ann", "password": PASSWORD}
    with serve_in_thread(create_app(settings)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            answers = await asyncio.gather(*(client.post("/auth/login", json=right) for _ in range(6)))
            refused = [answer for answer in answers if answer.status_code == 429]
            assert refused, [answer.status_code for answer in answers]  # argon2 keeps the first two under way
            assert {answer.headers["retry-after"] for answer in refused} == {"1"}
            assert {answer.json()["retry_after_s"] for answer in refused} == {1}
            await asyncio.sleep(1)
            for _ in refused:
                assert (await client.post("/auth/login", json=right)).status_code == 200


def test_failures_from_one_address_are_limited_across_usernames(settings):
    settings = settings.model_copy(update={"login_attempts_per_ip": 4})
    with TestClient(create_app(settings), client=("203.0.113.7", 5000)) as client:
        statuses = [_bad_login(client, username).status_code for username in ("ann", "bob", "ada", "nobody")]
        assert statuses == [401, 401, 401, 401]
        assert _bad_login(client, "someone").status_code == 429
    with TestClient(create_app(settings), client=("203.0.113.8", 5000)) as elsewhere:
        assert _bad_login(elsewhere, "someone").status_code == 401


def test_an_ipv6_client_cannot_dodge_the_address_limit_by_moving_within_its_network(settings):
    """An IPv6 host picks any address of its /64 at will: each new one must not bring a fresh budget."""
    settings = settings.model_copy(update={"login_attempts_per_ip": 3})
    statuses = []
    for host in range(1, 5):
        with TestClient(create_app(settings), client=(f"2001:db8:1:2::{host:x}", 5000)) as client:
            statuses.append(_bad_login(client, f"user{host}").status_code)
    assert statuses == [401, 401, 401, 429]
    with TestClient(create_app(settings), client=("2001:db8:1:3::1", 5000)) as next_network:
        assert _bad_login(next_network, "someone").status_code == 401


def test_x_forwarded_for_counts_only_from_a_trusted_proxy(settings):
    settings = settings.model_copy(update={"login_attempts_per_ip": 2, "trusted_proxies": ("10.0.0.0/8",)})
    with TestClient(create_app(settings), client=("10.0.0.5", 5000)) as via_proxy:
        for client_ip in ("198.51.100.1", "198.51.100.2"):  # each client behind the proxy has its own budget
            headers = {"X-Forwarded-For": client_ip}
            assert [_bad_login(via_proxy, f"u{n}", headers=headers).status_code for n in range(2)] == [401, 401]
        assert _bad_login(via_proxy, "u9", headers={"X-Forwarded-For": "198.51.100.1"}).status_code == 429
    with TestClient(create_app(settings), client=("192.0.2.50", 5000)) as direct:
        for forged in ("198.51.100.3", "198.51.100.4"):  # not a proxy: its header is ignored
            assert _bad_login(direct, "u1", headers={"X-Forwarded-For": forged}).status_code == 401
        assert _bad_login(direct, "u2", headers={"X-Forwarded-For": "198.51.100.5"}).status_code == 429


def test_x_forwarded_for_from_the_loopback_is_ignored_over_real_http_when_no_proxy_is_trusted(settings):
    """The HTTP server itself must not trust the header either (uvicorn would, from 127.0.0.1, by default)."""
    settings = settings.model_copy(update={"login_attempts_per_ip": 2, "trusted_proxies": ()})
    with serve_in_thread(create_app(settings)) as url, httpx.Client(base_url=url) as client:
        forged = [{"X-Forwarded-For": f"198.51.100.{n}"} for n in range(1, 4)]
        statuses = [_bad_login(client, f"u{n}", headers=headers).status_code for n, headers in enumerate(forged)]
        assert statuses == [401, 401, 429]  # all three counted against 127.0.0.1


def test_chat_requests_per_user_are_limited_across_the_chat_routes(settings):
    settings = settings.model_copy(update={"chat_requests_per_minute": 3})
    with TestClient(create_app(settings)) as client:
        ann, bob = login(client, "ann"), login(client, "bob")
        assert client.post("/api/chat", json={"query": "q"}, headers=ann).status_code == 200
        assert client.post("/api/chat/stream", json={"query": "q"}, headers=ann).status_code == 200
        completion = {"messages": [{"role": "user", "content": "q"}]}
        assert client.post("/v1/chat/completions", json=completion, headers=ann).status_code == 200
        refused = client.post("/api/chat", json={"query": "q"}, headers=ann)
        assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
        assert 50 <= int(refused.headers["retry-after"]) <= 60
        refused = client.post("/v1/chat/completions", json=completion, headers=ann)  # in OpenAI's shape
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
        assert 50 <= int(refused.headers["retry-after"]) <= 60
        assert client.post("/api/chat", json={"query": "q"}, headers=bob).status_code == 200
        assert client.post("/api/search", json={"query": "q"}, headers=ann).status_code != 429  # not a question


def test_ratings_per_user_are_limited(settings):
    settings = settings.model_copy(update={"feedback_per_minute": 2})
    with TestClient(create_app(settings)) as client:
        ann, bob = login(client, "ann"), login(client, "bob")
        answer = client.post("/api/chat", json={"query": "q"}, headers=ann).json()["metadata"]["request_id"]
        rating = {"request_id": answer, "rating": 1}
        assert [client.post("/api/feedback", json=rating, headers=ann).status_code for _ in range(2)] == [202, 202]
        refused = client.post("/api/feedback", json=rating, headers=ann)
        assert refused.status_code == 429 and refused.json()["error"] == "rate_limited"
        assert 50 <= int(refused.headers["retry-after"]) <= 60
        unknown = client.post("/api/feedback", json={"request_id": "not-asked", "rating": 1}, headers=bob)
        assert unknown.status_code == 404  # only ratings that are published count
        asked = client.post("/api/chat", json={"query": "q"}, headers=bob).json()["metadata"]["request_id"]
        rated = client.post("/api/feedback", json={"request_id": asked, "rating": -1}, headers=bob)
        assert rated.status_code == 202  # bob's own budget
        assert client.post("/api/chat", json={"query": "q"}, headers=ann).status_code == 200  # questions apart


def test_two_gateways_on_one_redis_share_the_limits(settings):
    settings = settings.model_copy(update={"login_attempts_per_username": 4, "chat_requests_per_minute": 4})
    with serve_in_thread(create_app(settings)) as one, serve_in_thread(create_app(settings)) as two:
        for base in (one, two, one, two):
            response = httpx.post(f"{base}/auth/login", json={"username": "ann", "password": "wrong password"})
            assert response.status_code == 401
        for base in (one, two):
            response = httpx.post(f"{base}/auth/login", json={"username": "ann", "password": "wrong password"})
            assert response.status_code == 429

        token = httpx.post(f"{one}/auth/login", json={"username": "bob", "password": PASSWORD}).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        asked = [httpx.post(f"{base}/api/chat", json={"query": "q"}, headers=auth) for base in (one, two) * 3]
        statuses = [response.status_code for response in asked]
        assert statuses == [200, 200, 200, 200, 429, 429]


def test_redis_down_fails_closed_with_503(unique):
    settings = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", redis_prefix=unique, redis_timeout_s=0.5)
    with TestClient(create_app(settings)) as client:
        response = _bad_login(client)
    assert response.status_code == 503 and response.json()["error"] == "session_store_unavailable"


async def test_the_limiter_lets_no_more_than_the_limit_through_a_parallel_burst(redis_url, unique):
    # The burst opens 30 connections at once: on a starved machine that took over 2 s. What is proven is the count.
    redis = connect(redis_url, timeout_s=30)
    limiter = RedisRateLimiter(redis, prefix=unique, timeout_s=30)
    buckets = [Bucket("burst", Limit(5, 60)), Bucket("burst-wide", Limit(100, 60))]
    try:
        waits = await asyncio.gather(*(limiter.take(buckets, event_id=f"e{n}") for n in range(30)))
        assert sum(1 for w in waits if w == 0) == 5
        assert all(55 < w <= 60 for w in waits if w > 0)
        assert await redis.zcard(f"{unique}:ratelimit:burst-wide") == 5  # refused events are counted nowhere
        assert 0 < await redis.pttl(f"{unique}:ratelimit:burst") <= 60_000

        admitted = [f"e{n}" for n, w in enumerate(waits) if w == 0]
        await limiter.give_back(["burst", "burst-wide"], event_id=admitted[0])
        assert await limiter.take(buckets, event_id="again") == 0
        assert await limiter.take(buckets, event_id="once-more") > 0
    finally:
        await redis.aclose()


async def test_events_leave_the_window_as_it_slides(redis_url, unique):
    redis = connect(redis_url, timeout_s=2)
    limiter = RedisRateLimiter(redis, prefix=unique, timeout_s=2)
    bucket = [Bucket("slide", Limit(2, 0.4))]
    try:
        assert await limiter.take(bucket, event_id="a") == 0
        await asyncio.sleep(0.2)
        assert await limiter.take(bucket, event_id="b") == 0
        wait = await limiter.take(bucket, event_id="c")
        assert 0.1 < wait <= 0.2  # "a" leaves first, 0.4 s after it came
        await asyncio.sleep(wait + 0.02)
        assert await limiter.take(bucket, event_id="c") == 0
        assert 0.1 < await limiter.take(bucket, event_id="d") <= 0.2  # now "b" is the one to wait for
    finally:
        await redis.aclose()


async def test_events_under_way_hold_a_bucket_a_second_until_settled_or_given_back(redis_url, unique, monkeypatch):
    redis = connect(redis_url, timeout_s=2)
    limiter = RedisRateLimiter(redis, prefix=unique, timeout_s=2)
    bucket = [Bucket("logins", Limit(2, 60))]
    try:
        assert await limiter.take(bucket, event_id="a", under_way=True) == 0
        assert await limiter.take(bucket, event_id="b", under_way=True) == 0
        assert await limiter.take(bucket, event_id="c", under_way=True) == 1  # "a" or "b" may yet succeed
        await limiter.give_back(["logins"], event_id="a")  # a right password
        assert await limiter.take(bucket, event_id="c", under_way=True) == 0
        await limiter.settle(["logins"], event_id="b")  # a wrong one
        assert await limiter.take(bucket, event_id="d", under_way=True) == 1  # "c" is still under way
        await limiter.settle(["logins"], event_id="c")
        assert 59 < await limiter.take(bucket, event_id="d", under_way=True) <= 60  # failures hold it their window
        assert await limiter.take(bucket, event_id="d") > 1  # an event never under way counts as settled

        monkeypatch.setattr("services.gateway.adapters.redis_rate_limits.UNDER_WAY_AT_MOST_S", 0.2)
        stale = [Bucket("stale", Limit(1, 60))]
        assert await limiter.take(stale, event_id="e", under_way=True) == 0  # never settled: its gateway stopped
        assert await limiter.take(stale, event_id="f") == 1
        await asyncio.sleep(0.25)
        assert 59 < await limiter.take(stale, event_id="f") <= 60  # then taken for the failure it may have been
    finally:
        await redis.aclose()
