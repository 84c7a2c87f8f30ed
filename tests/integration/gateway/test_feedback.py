"""Feedback on the real Redis and RabbitMQ: a user rates their own answer, and the rating reaches the broker."""
import asyncio
import time

import aio_pika
import pytest
from fastapi.testclient import TestClient
from redis import Redis

from services.gateway.main import create_app
from shared.events import FeedbackReceived
from tests.integration.gateway.chat_stand_in import chat_stand_in, gateway_settings, login
from tests.support import free_port, read_events, serve_in_thread, wait_until

pytestmark = pytest.mark.integration
QUESTION = {"query": "q"}


@pytest.fixture(scope="module")
def chat_url():
    with serve_in_thread(chat_stand_in()) as url:
        yield url


@pytest.fixture
def settings(redis_url, amqp_url, unique, chat_url):
    return gateway_settings(
        redis_url=redis_url,
        prefix=unique,
        chat_url=chat_url,
        amqp_url=amqp_url,
        events_exchange=f"{unique}.events",
        analytics_queue=f"{unique}.analytics",
    )


def _rate(client, auth, request_id, rating, comment=None, **headers):
    body = {"request_id": request_id, "rating": rating} | ({"comment": comment} if comment is not None else {})
    return client.post("/api/feedback", json=body, headers={**auth, **headers})


def test_a_user_rates_their_own_answer_and_the_event_reaches_the_broker(settings, amqp_url, unique):
    with TestClient(create_app(settings)) as client:
        ann = login(client, "ann")
        me = client.get("/auth/me", headers=ann).json()["user"]["id"]
        answer = client.post("/api/chat", json={"query": "q"}, headers=ann)
        request_id = answer.json()["metadata"]["request_id"]
        assert request_id == answer.headers["x-request-id"]

        response = _rate(client, ann, request_id, -1, "cites the wrong page", **{"X-Request-ID": f"{unique}-fb"})
        assert response.status_code == 202, response.text
        assert response.json() == {"status": "accepted", "request_id": request_id, "rating": -1}
        assert _rate(client, ann, request_id, 1).status_code == 202  # rating again replaces the rating
        received = asyncio.run(read_events(amqp_url, unique, 2))

    assert [type(event) for _, event in received] == [FeedbackReceived, FeedbackReceived]
    (message, first), (_, second) = received
    assert message.routing_key == "analytics.feedback.received"
    assert message.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
    assert (first.source_service, first.request_id) == ("gateway", f"{unique}-fb")
    assert first.user_id == me
    assert first.data.rated_request_id == request_id and first.data.rating == -1
    assert first.data.comment == "cites the wrong page"
    assert first.trace_id and first.session_id
    assert (second.data.rating, second.data.comment) == (1, None) and second.occurred_at >= first.occurred_at


def test_every_chat_route_records_who_asked(settings, redis_url, unique):
    completion = {"messages": [{"role": "user", "content": "q"}]}
    routes = (("/api/chat", QUESTION), ("/api/chat/stream", QUESTION), ("/v1/chat/completions", completion))
    with TestClient(create_app(settings)) as client:
        ann = login(client, "ann")
        me = client.get("/auth/me", headers=ann).json()["user"]["id"]
        for path, body in routes:
            request_id = f"{unique}{path.replace('/', '.')}"
            response = client.post(path, json=body, headers={**ann, "X-Request-ID": request_id})
            assert response.status_code == 200, response.text
            assert _rate(client, ann, request_id, 1).status_code == 202
    redis = Redis.from_url(redis_url, decode_responses=True)
    key = f"{unique}:asked:{unique}.api.chat"
    assert redis.get(key) == me and 604_700 < redis.ttl(key) <= 604_800


def test_someone_elses_or_an_unknown_request_is_404(settings):
    with TestClient(create_app(settings)) as client:
        ann, bob = login(client, "ann"), login(client, "bob")
        asked = client.post("/api/chat", json={"query": "q"}, headers=ann).json()["metadata"]["request_id"]
        for auth, request_id in ((bob, asked), (ann, "never-asked")):
            response = _rate(client, auth, request_id, 1)
            assert response.status_code == 404 and response.json()["error"] == "not_found"
        assert _rate(client, {"Authorization": "Bearer nonsense"}, asked, 1).status_code == 401


def test_a_used_request_id_cannot_be_sent_with_another_question(settings, unique):
    with TestClient(create_app(settings)) as client:
        ann, bob = login(client, "ann"), login(client, "bob")
        taken = {"X-Request-ID": f"{unique}-taken"}
        assert client.post("/api/chat", json={"query": "q"}, headers={**ann, **taken}).status_code == 200
        reused = client.post("/api/chat", json={"query": "q"}, headers={**bob, **taken})
        assert reused.status_code == 409 and reused.json()["error"] == "request_id_taken"
        assert _rate(client, bob, f"{unique}-taken", 1).status_code == 404
        retried = client.post("/api/chat", json={"query": "q"}, headers={**ann, **taken})  # analytics would count it twice
        assert retried.status_code == 409 and retried.json()["error"] == "request_id_taken"


def test_a_rating_after_the_feedback_window_is_404_and_frees_the_request_id(settings, redis_url, unique):
    settings = settings.model_copy(update={"feedback_window_s": 1})
    request_id = f"{unique}-window"
    with TestClient(create_app(settings)) as client:
        ann = login(client, "ann")
        asked = {**ann, "X-Request-ID": request_id}
        assert client.post("/api/chat", json=QUESTION, headers=asked).status_code == 200
        assert _rate(client, ann, request_id, 1).status_code == 202
        redis, asked_key = Redis.from_url(redis_url), f"{unique}:asked:{request_id}"
        assert redis.exists(asked_key), f"no {asked_key}"
        wait_until(lambda: not redis.exists(asked_key), timeout=5, interval=0.05, what=f"{asked_key} to expire")

        late = _rate(client, ann, request_id, 1)
        assert late.status_code == 404 and late.json()["error"] == "not_found"
        assert client.post("/api/chat", json=QUESTION, headers=asked).status_code == 200  # the id is free again


INVALID = [
    {"request_id": "r", "rating": 0},
    {"request_id": "r", "rating": 2},
    {"request_id": "r", "rating": "good"},
    {"request_id": "r", "rating": True},
    {"request_id": "r"},
    {"request_id": "", "rating": 1},
    {"request_id": "r", "rating": 1, "comment": "x" * 2001},
]


def test_invalid_feedback_is_422(settings):
    with TestClient(create_app(settings)) as client:
        ann = login(client, "ann")
        for body in INVALID:
            response = client.post("/api/feedback", json=body, headers=ann)
            assert response.status_code == 422 and response.json()["error"] == "invalid_request", body


def test_a_broker_that_is_down_does_not_fail_the_rating(settings):
    settings = settings.model_copy(update={"amqp_url": f"amqp://guest:guest@127.0.0.1:{free_port()}/"})
    with TestClient(create_app(settings)) as client:
        ann = login(client, "ann")
        asked = client.post("/api/chat", json=QUESTION, headers=ann).json()["metadata"]["request_id"]
        started = time.monotonic()
        response = _rate(client, ann, asked, 1)
        assert response.status_code == 202 and time.monotonic() - started < 1.0
        assert client.app.state.publisher.published == 0  # held back, retried until the broker answers
