"""/auth/sessions and session lifetimes against the real Redis: what is stored, sliding TTL with an
absolute maximum age, the per-user index, listing and ending one's own sessions."""
import asyncio
import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from services.gateway.adapters.redis_store import RedisSessionStore, RedisUserStore, connect
from services.gateway.domain import Session
from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.users import add_user

pytestmark = pytest.mark.integration
PASSWORD = "correct horse battery"
TTL_S, MAX_AGE_S = 600, 3600


async def _seed(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    for name in ("ann", "bob"):
        await add_user(users=RedisUserStore(redis, prefix=prefix, timeout_s=2), username=name, password=PASSWORD, roles=["user"])
    await redis.aclose()


@pytest.fixture
def client(redis_url, unique):
    asyncio.run(_seed(redis_url, unique))
    settings = Settings(
        redis_url=redis_url, redis_prefix=unique, session_ttl_seconds=TTL_S, session_max_age_seconds=MAX_AGE_S
    )
    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def redis(redis_url):
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _login(client, username="ann") -> tuple[str, dict[str, str]]:
    response = client.post("/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    token = response.json()["token"]
    return hashlib.sha256(token.encode()).hexdigest(), {"Authorization": f"Bearer {token}"}


def _user_id(client, auth) -> str:
    return client.get("/auth/me", headers=auth).json()["user"]["id"]


def test_redis_holds_digests_listed_under_their_user_and_expiring_with_them(client, redis, unique):
    (first, auth), (second, _) = _login(client), _login(client)
    index = f"{unique}:user-sessions:{_user_id(client, auth)}"
    assert redis.smembers(index) == {first, second}
    assert TTL_S - 10 <= redis.ttl(index) <= TTL_S
    stored = redis.hgetall(f"{unique}:session:{first}")
    assert set(stored) == {"public_id", "user_id", "username", "roles", "created_at", "last_seen"}
    assert auth["Authorization"][7:] not in str(stored) and first not in str(stored)


def test_listing_shows_public_ids_and_marks_the_current_session(client):
    (first, _), (second, auth) = _login(client), _login(client)
    _login(client, "bob")
    response = client.get("/auth/sessions", headers=auth)
    assert response.status_code == 200
    sessions = response.json()["sessions"]
    assert [s["current"] for s in sessions] == [False, True]
    assert all(digest not in response.text and digest[:16] not in response.text for digest in (first, second))
    current = sessions[1]
    assert datetime.fromisoformat(current["expires_at"]) - datetime.fromisoformat(current["last_seen"]) == timedelta(seconds=TTL_S)


def test_ending_one_session_by_its_id(client, redis, unique):
    (other, other_auth), (_, auth) = _login(client), _login(client)
    bob_digest, bob_auth = _login(client, "bob")
    ids = [s["id"] for s in client.get("/auth/sessions", headers=auth).json()["sessions"]]
    bobs = client.get("/auth/sessions", headers=bob_auth).json()["sessions"][0]["id"]

    assert client.delete(f"/auth/sessions/{bobs}", headers=auth).status_code == 404
    assert client.delete("/auth/sessions/0123456789abcdef", headers=auth).status_code == 404
    assert client.get("/auth/me", headers=bob_auth).status_code == 200

    assert client.delete(f"/auth/sessions/{ids[0]}", headers=auth).status_code == 204
    assert client.get("/auth/me", headers=other_auth).status_code == 401
    assert not redis.exists(f"{unique}:session:{other}")
    assert other not in redis.smembers(f"{unique}:user-sessions:{_user_id(client, auth)}")
    assert client.delete(f"/auth/sessions/{ids[0]}", headers=auth).status_code == 404


def test_an_expired_session_is_refused_and_dropped_from_the_index(client, redis, unique):
    (lapsed, lapsed_auth), (_, auth) = _login(client), _login(client)
    redis.delete(f"{unique}:session:{lapsed}")  # what its TTL running out does
    response = client.get("/auth/me", headers=lapsed_auth)
    assert response.status_code == 401 and response.json() == {"error": "unauthorized", "message": "invalid or expired token"}
    index = f"{unique}:user-sessions:{_user_id(client, auth)}"
    assert lapsed in redis.smembers(index)  # cleaned lazily ...
    assert len(client.get("/auth/sessions", headers=auth).json()["sessions"]) == 1
    assert lapsed not in redis.smembers(index)  # ... by the next listing


def test_a_busy_session_still_ends_at_its_maximum_age(client, redis, unique):
    (old, old_auth), (_, young_auth) = _login(client), _login(client)
    key = f"{unique}:session:{old}"
    login_time = datetime.now(UTC) - timedelta(seconds=MAX_AGE_S - 5)
    redis.hset(key, "created_at", login_time.isoformat())
    me = client.get("/auth/me", headers=old_auth)
    assert me.status_code == 200
    assert datetime.fromisoformat(me.json()["expires_at"]) == login_time + timedelta(seconds=MAX_AGE_S)
    assert 0 < redis.ttl(key) <= 6  # the sliding TTL stops at the hard limit
    index = f"{unique}:user-sessions:{_user_id(client, young_auth)}"
    assert redis.ttl(index) > TTL_S - 10  # ... without shortening the index the younger session needs

    redis.hset(key, "created_at", (login_time - timedelta(seconds=10)).isoformat())
    assert client.get("/auth/me", headers=old_auth).status_code == 401
    assert not redis.exists(key)


def test_a_session_stored_by_an_older_gateway_is_refused(client, redis, unique):
    digest, auth = _login(client)
    redis.hdel(f"{unique}:session:{digest}", "public_id")  # no public id, not listed under its user
    assert client.get("/auth/me", headers=auth).status_code == 401


async def test_a_touch_racing_a_logout_leaves_no_stray_key(redis_url, unique):
    redis = connect(redis_url, timeout_s=2)
    store = RedisSessionStore(redis, prefix=unique, timeout_s=2)
    now = datetime.now(UTC)
    session = Session(
        id="d" * 64, public_id="p" * 16, user_id="u", username="ann", roles=("user",),
        created_at=now, last_seen=now, expires_at=now + timedelta(seconds=TTL_S),
    )
    await store.create(session, ttl_s=TTL_S)
    await store.delete(session)
    await store.touch(session, seen_at=now, ttl_s=TTL_S)
    assert await redis.exists(f"{unique}:session:{session.id}") == 0
    await redis.aclose()
