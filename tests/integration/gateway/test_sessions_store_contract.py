"""One SessionStore contract, two implementations: the fake the unit tests use and Redis."""
from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from services.gateway.adapters.redis_store import RedisSessionStore, connect
from services.gateway.domain import Session
from tests.unit.gateway.fakes import FakeSessionStore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["fake", "redis"])
async def store_and_expire(request, redis_url, unique):
    """The store, and a way to make one of its sessions lapse as its TTL would."""
    if request.param == "fake":
        fake = FakeSessionStore()

        async def lapse_in_fake(session_id: str) -> None:
            fake.expire(session_id)

        yield fake, lapse_in_fake
        return
    redis = connect(redis_url, timeout_s=2)
    store = RedisSessionStore(redis, prefix=unique, timeout_s=2)

    async def lapse_in_redis(session_id: str) -> None:
        await redis.pexpire(f"{unique}:session:{session_id}", 1)
        await asyncio.sleep(0.01)

    yield store, lapse_in_redis
    await redis.aclose()


def _session(user_id: str, *, age_s: int = 0) -> Session:
    created = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=age_s)
    return Session(
        id=secrets.token_hex(32),
        public_id=secrets.token_hex(8),
        user_id=user_id,
        username=f"name-{user_id}",
        roles=("user", "analyst"),
        created_at=created,
        last_seen=created,
        expires_at=created + timedelta(seconds=600),
    )


async def test_a_session_reads_back_as_stored(store_and_expire):
    store, _ = store_and_expire
    session = _session("u1")
    await store.create(session, ttl_s=600)
    got = await store.get(session.id)
    assert replace(got, expires_at=session.expires_at) == session
    assert await store.get(secrets.token_hex(32)) is None


async def test_touch_records_activity_and_never_revives_an_ended_session(store_and_expire):
    store, _ = store_and_expire
    session = _session("u1")
    await store.create(session, ttl_s=600)
    seen = session.created_at + timedelta(seconds=5)
    await store.touch(session, seen_at=seen, ttl_s=600)
    assert (await store.get(session.id)).last_seen == seen
    await store.delete(session)
    await store.touch(session, seen_at=seen, ttl_s=600)
    assert await store.get(session.id) is None
    assert await store.list_for_user("u1") == []


async def test_a_users_sessions_are_listed_oldest_first_without_the_lapsed_ones(store_and_expire):
    store, expire = store_and_expire
    old, lapsed, new = _session("u1", age_s=30), _session("u1", age_s=20), _session("u1", age_s=10)
    for session in (new, lapsed, old, _session("u2")):
        await store.create(session, ttl_s=600)
    await expire(lapsed.id)
    assert [s.public_id for s in await store.list_for_user("u1")] == [old.public_id, new.public_id]
    await store.delete(old)
    assert [s.public_id for s in await store.list_for_user("u1")] == [new.public_id]
    assert await store.list_for_user("nobody") == []


async def test_all_of_a_users_sessions_end_at_once(store_and_expire):
    store, expire = store_and_expire
    mine, other = [_session("u1") for _ in range(3)], _session("u2")
    for session in (*mine, other):
        await store.create(session, ttl_s=600)
    await expire(mine[0].id)
    assert await store.delete_all_for_user("u1") == 2
    assert [await store.get(s.id) for s in mine] == [None, None, None]
    assert await store.list_for_user("u1") == [] and await store.delete_all_for_user("u1") == 0
    assert await store.get(other.id) is not None


async def test_a_login_forgets_the_lapsed_sessions_of_its_user(redis_url, unique):
    """A user who logs in often but never lists their sessions (a script) must not keep every session
    id ever issued in their set: each login extends the set's expiry, so it would never go away."""
    redis = connect(redis_url, timeout_s=2)
    store = RedisSessionStore(redis, prefix=unique, timeout_s=2)
    try:
        lapsed = [_session("u1") for _ in range(3)]
        for session in lapsed:
            await store.create(session, ttl_s=600)
            await redis.delete(f"{unique}:session:{session.id}")  # as its TTL would
        latest = _session("u1")
        await store.create(latest, ttl_s=600)
        assert await redis.smembers(f"{unique}:user-sessions:u1") == {latest.id}
    finally:
        await redis.aclose()
