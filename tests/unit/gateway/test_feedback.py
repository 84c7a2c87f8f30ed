from datetime import UTC, datetime

import pytest

from services.gateway import feedback
from services.gateway.domain import Session
from services.gateway.feedback import RequestIdTaken
from services.gateway.rate_limits import Limit, RateLimited
from shared.context import request_id_var
from shared.errors import NotFound
from shared.events import FeedbackReceived, routing_key
from shared.tracing import continued_trace
from tests.unit.gateway.fakes import FakeRateLimiter

pytestmark = pytest.mark.unit
NOW = datetime.now(UTC)
TRACE = "0af7651916cd43dd8448eb211c80319c"
NO_LIMIT = Limit(0, window_s=60)


class FakeRequestOwners:
    def __init__(self) -> None:
        self.owners: dict[str, str] = {}
        self.ttls: dict[str, int] = {}

    async def claim(self, request_id: str, *, user_id: str, ttl_s: int) -> bool:
        if request_id in self.owners:
            return False
        self.owners[request_id], self.ttls[request_id] = user_id, ttl_s
        return True

    async def owner(self, request_id: str) -> str | None:
        return self.owners.get(request_id)

    async def release(self, request_id: str) -> None:
        self.owners.pop(request_id, None)


class FakePublisher:
    def __init__(self) -> None:
        self.events: list = []

    def submit(self, event) -> None:
        self.events.append(event)


def _session(user_id: str) -> Session:
    return Session(
        id="digest", public_id=f"pub-{user_id}", user_id=user_id, username=user_id, roles=("user",),
        created_at=NOW, last_seen=NOW, expires_at=NOW,
    )


async def _rate(owners, publisher, user_id, rated, rating, comment=None, limiter=None, limit=NO_LIMIT):
    return await feedback.rate_answer(
        owners=owners, publisher=publisher, limiter=limiter or FakeRateLimiter(), limit=limit,
        session=_session(user_id), rated_request_id=rated, rating=rating, comment=comment,
    )


@pytest.fixture
def request_context():
    token = request_id_var.set("feedback-req")
    with continued_trace(f"00-{TRACE}-b7ad6b7169203331-01"):
        yield
    request_id_var.reset(token)


async def test_the_asker_rates_their_answer_and_the_rating_is_published(request_context):
    owners, publisher = FakeRequestOwners(), FakePublisher()
    await feedback.remember_request(owners=owners, request_id="asked-1", user_id="u1", ttl_s=604_800)
    assert owners.ttls["asked-1"] == 604_800

    event = await _rate(owners, publisher, "u1", "asked-1", -1, comment="  the second citation is wrong  ")
    assert publisher.events == [event] and isinstance(event, FeedbackReceived)
    assert routing_key(event) == "analytics.feedback.received"
    assert (event.source_service, event.request_id, event.trace_id) == ("gateway", "feedback-req", TRACE)
    assert event.traceparent == f"00-{TRACE}-b7ad6b7169203331-01"
    assert (event.user_id, event.session_id) == ("u1", "pub-u1")
    assert event.data.rated_request_id == "asked-1" and event.data.rating == -1
    assert event.data.comment == "the second citation is wrong"


async def test_rating_again_publishes_the_new_rating():
    owners, publisher = FakeRequestOwners(), FakePublisher()
    await feedback.remember_request(owners=owners, request_id="asked-1", user_id="u1", ttl_s=60)
    for rating in (1, -1):
        await _rate(owners, publisher, "u1", "asked-1", rating, comment="   ")
    assert [e.data.rating for e in publisher.events] == [1, -1]
    assert all(e.data.comment is None for e in publisher.events)


@pytest.mark.parametrize("rated", ["asked-by-u2", "never-asked"])
async def test_another_users_or_an_unknown_request_is_not_found(rated):
    owners, publisher = FakeRequestOwners(), FakePublisher()
    await feedback.remember_request(owners=owners, request_id="asked-by-u2", user_id="u2", ttl_s=60)
    with pytest.raises(NotFound):
        await _rate(owners, publisher, "u1", rated, 1)
    assert publisher.events == []


async def test_a_request_id_names_one_question_only():
    owners = FakeRequestOwners()
    await feedback.remember_request(owners=owners, request_id="r1", user_id="u1", ttl_s=60)
    for user in ("u2", "u1"):  # another user, or the asker retrying: either would count one answer twice
        with pytest.raises(RequestIdTaken) as taken:
            await feedback.remember_request(owners=owners, request_id="r1", user_id=user, ttl_s=60)
        assert taken.value.status_code == 409 and taken.value.code == "request_id_taken"
    assert owners.owners == {"r1": "u1"}


async def test_a_rating_over_the_limit_is_refused_and_not_published():
    owners, publisher, limiter = FakeRequestOwners(), FakePublisher(), FakeRateLimiter()
    await feedback.remember_request(owners=owners, request_id="asked-1", user_id="u1", ttl_s=60)
    with pytest.raises(NotFound):  # only ratings of one's own answers are counted
        await _rate(owners, publisher, "u1", "never-asked", 1, limiter=limiter, limit=Limit(1, 60))
    await _rate(owners, publisher, "u1", "asked-1", 1, limiter=limiter, limit=Limit(1, 60))
    with pytest.raises(RateLimited):
        await _rate(owners, publisher, "u1", "asked-1", -1, limiter=limiter, limit=Limit(1, 60))
    assert [e.data.rating for e in publisher.events] == [1]
