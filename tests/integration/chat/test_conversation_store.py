"""The Redis conversation store against the real Redis: order, cap, TTL, ownership and outages."""
import asyncio
import json
import time
import uuid

import pytest
from redis.asyncio import Redis

from services.chat.adapters.redis_conversations import RedisConversationStore, open_conversation_store
from services.chat.errors import ConversationNotFound
from services.chat.models import ChatRequest
from services.chat.pipeline import ChatPipeline, PipelineConfig
from services.chat.ports import Exchange
from services.chat.reformulation import HeuristicReformulator
from services.chat.settings import Settings
from shared.caller import Caller
from shared.errors import DependencyUnavailable
from tests.unit.chat.fakes import FakeRetriever, ListPublisher, RecordingGenerator

pytestmark = pytest.mark.integration

TTL_S = 600


def turn(n: int) -> Exchange:
    return Exchange(question=f"and {n}?", standalone=f"What about number {n}?", answer=f"Number {n} is fine [1].")


@pytest.fixture
def conversation_id(unique: str) -> str:
    return f"{unique}-{uuid.uuid4().hex}"


@pytest.fixture
async def store(redis_url: str):
    settings = Settings(redis_url=redis_url, conversation_ttl_s=TTL_S, conversation_max_turns=3)
    conversations = open_conversation_store(settings)
    yield conversations
    await conversations.aclose()


@pytest.fixture
async def redis(redis_url: str):
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


async def test_turns_come_back_oldest_first(store, conversation_id):
    for n in (1, 2):
        await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(n))
    assert await store.history(conversation_id=conversation_id, user_id="alice") == [turn(1), turn(2)]


async def test_turns_come_back_in_the_order_they_were_asked_not_finished(store, conversation_id, redis):
    asked_first = Exchange(question="Slow one?", standalone="Slow one?", answer="A [1].", asked_at=100.0)
    asked_later = Exchange(question="Quick one?", standalone="Quick one?", answer="B [1].", asked_at=101.0)
    kept_before = json.dumps({"question": "Old?", "standalone": "Old?", "answer": "C [1]."})  # no asked_at
    await redis.set(store.owner_key(conversation_id), "alice")
    await redis.rpush(store.turns_key(conversation_id), kept_before)
    for exchange in (asked_later, asked_first):  # the quick answer finished first
        await store.append(conversation_id=conversation_id, user_id="alice", exchange=exchange)
    history = await store.history(conversation_id=conversation_id, user_id="alice")
    assert [e.question for e in history] == ["Old?", "Slow one?", "Quick one?"]


async def test_only_the_last_max_turns_are_kept(store, conversation_id):
    for n in range(1, 6):
        await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(n))
    assert await store.history(conversation_id=conversation_id, user_id="alice") == [turn(3), turn(4), turn(5)]


async def test_the_cap_keeps_the_turns_asked_last_when_a_slow_turn_finishes_late(store, conversation_id):
    def asked(n: int) -> Exchange:
        return Exchange(question=f"q{n}?", standalone=f"q{n}?", answer=f"a{n} [1].", asked_at=1000.0 + n)

    # q2 was asked before q3, q4 and q5 but its answer took longest; the cap is 3 turns.
    for n in (1, 3, 4, 5, 2):
        await store.append(conversation_id=conversation_id, user_id="alice", exchange=asked(n))
    history = await store.history(conversation_id=conversation_id, user_id="alice")
    assert [e.question for e in history] == ["q3?", "q4?", "q5?"]


async def test_an_unknown_conversation_has_no_history(store, conversation_id):
    assert await store.history(conversation_id=conversation_id, user_id="alice") == []


async def test_both_keys_get_the_ttl_and_each_append_renews_it(store, redis, conversation_id):
    owner, turns = store.owner_key(conversation_id), store.turns_key(conversation_id)
    await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(1))
    assert TTL_S - 5 <= await redis.ttl(owner) <= TTL_S and TTL_S - 5 <= await redis.ttl(turns) <= TTL_S

    await redis.expire(owner, 30)
    await redis.expire(turns, 30)
    await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(2))
    assert await redis.pttl(owner) > (TTL_S - 5) * 1000 and await redis.pttl(turns) > (TTL_S - 5) * 1000


async def test_another_users_conversation_is_not_found(store, conversation_id):
    await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(1))
    with pytest.raises(ConversationNotFound):
        await store.history(conversation_id=conversation_id, user_id="mallory")
    with pytest.raises(ConversationNotFound):
        await store.append(conversation_id=conversation_id, user_id="mallory", exchange=turn(2))
    assert await store.history(conversation_id=conversation_id, user_id="alice") == [turn(1)]


async def test_a_new_owner_does_not_inherit_leftover_turns(store, redis, conversation_id):
    await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(1))
    await redis.delete(store.owner_key(conversation_id))  # the owner key expired a moment before the turns
    await store.append(conversation_id=conversation_id, user_id="bob", exchange=turn(2))
    assert await store.history(conversation_id=conversation_id, user_id="bob") == [turn(2)]


async def test_concurrent_first_appends_leave_exactly_one_owner(store, unique):
    for attempt in range(20):
        conversation_id = f"{unique}-race-{attempt}"
        results = await asyncio.gather(
            *(store.append(conversation_id=conversation_id, user_id=user, exchange=turn(1)) for user in ("alice", "bob")),
            return_exceptions=True,
        )
        winners = [user for user, result in zip(("alice", "bob"), results) if result is None]
        refusals = [result for result in results if result is not None]
        assert len(winners) == 1 and len(refusals) == 1 and isinstance(refusals[0], ConversationNotFound)
        assert await store.history(conversation_id=conversation_id, user_id=winners[0]) == [turn(1)]



async def test_a_follow_up_after_the_conversation_expired_is_answered_as_new_and_says_so(redis_url, conversation_id):
    store = RedisConversationStore(Redis.from_url(redis_url, decode_responses=True), ttl_s=1, max_turns=10)
    chat = ChatPipeline(
        retriever=FakeRetriever(), generator=RecordingGenerator(), publisher=ListPublisher(),
        config=PipelineConfig(default_model="m", allowed_models=("m",)), conversations=store,
        reformulator=HeuristicReformulator(),
    )
    alice = Caller(user_id="alice", roles=("user",), session_id="s1")

    async def ask(query: str):
        return await chat.answer(request=ChatRequest(query=query, conversation_id=conversation_id), caller=alice)

    try:
        first, follow_up = await ask("How are login sessions stored?"), await ask("and its TTL?")
        await asyncio.sleep(1.5)  # past CONVERSATION_TTL_S
        after_expiry = await ask("Can it be changed?")
    finally:
        await store.aclose()
    assert [r.new_conversation for r in (first, follow_up, after_expiry)] == [True, False, True]
    assert follow_up.metadata.reformulated_query == "What about the TTL of login sessions?"
    assert after_expiry.conversation_id == conversation_id
    assert after_expiry.metadata.reformulated_query == "Can it be changed?"

async def test_an_unreachable_redis_is_a_named_503_within_the_timeout(conversation_id):
    store = open_conversation_store(Settings(redis_url="redis://127.0.0.1:1/0", redis_timeout_s=0.5))
    started = time.monotonic()
    with pytest.raises(DependencyUnavailable) as raised:
        await store.history(conversation_id=conversation_id, user_id="alice")
    assert time.monotonic() - started < 1.0
    assert raised.value.dependency == "conversation_store" and raised.value.code == "conversation_store_unavailable"
    assert await store.ping() is False
    await store.aclose()


async def test_a_redis_that_never_answers_times_out(conversation_id):
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(-1)  # accepts the connection, never replies

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = open_conversation_store(Settings(redis_url=f"redis://127.0.0.1:{port}/0", redis_timeout_s=0.3))
    started = time.monotonic()
    try:
        with pytest.raises(DependencyUnavailable, match="conversation store"):
            await store.append(conversation_id=conversation_id, user_id="alice", exchange=turn(1))
        assert time.monotonic() - started < 1.0
    finally:
        await store.aclose()
        server.close()


def test_bad_limits_are_refused_at_once():
    client = Redis.from_url("redis://127.0.0.1:1/0")
    with pytest.raises(ValueError, match="max_turns"):
        RedisConversationStore(client, ttl_s=60, max_turns=0)
    with pytest.raises(ValueError, match="ttl_s"):
        RedisConversationStore(client, ttl_s=0, max_turns=3)
