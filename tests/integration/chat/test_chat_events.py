"""Events from a chat request reach the real RabbitMQ; a broker that is down never fails or slows a request."""
from __future__ import annotations

import asyncio
import time

import aio_pika
import httpx
import pytest

from services.chat.main import create_app
from services.chat.settings import Settings
from shared.events import QuerySubmitted, ResponseGenerated
from tests.integration.chat.stand_ins import HEADERS, TOKEN, fake_retrieval_app
from tests.support import free_port, read_events, serve_in_thread

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def retrieval_url():
    app, _ = fake_retrieval_app()
    with serve_in_thread(app) as url:
        yield url


def test_a_chat_request_publishes_query_submitted_and_response_generated(amqp_url, unique, retrieval_url):
    settings = Settings(
        service_token=TOKEN,
        retrieval_url=retrieval_url,
        amqp_url=amqp_url,
        events_exchange=f"{unique}.events",
        analytics_queue=f"{unique}.analytics",
    )
    with serve_in_thread(create_app(settings)) as chat_url:
        response = httpx.post(
            f"{chat_url}/chat", json={"query": "How do I add a user?"}, headers={**HEADERS, "X-Request-ID": unique},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        received = asyncio.run(read_events(amqp_url, unique, 2))

    assert [type(event) for _, event in received] == [QuerySubmitted, ResponseGenerated]
    messages = [m for m, _ in received]
    assert [m.routing_key for m in messages] == ["analytics.query.submitted", "analytics.response.generated"]
    assert all(m.delivery_mode == aio_pika.DeliveryMode.PERSISTENT for m in messages)
    submitted, generated = (event for _, event in received)
    assert submitted.request_id == generated.request_id == unique
    assert (generated.user_id, generated.session_id, generated.source_service) == ("u1", "s1", "chat")
    assert generated.data.answered is True and generated.data.cited_doc_ids == ["users.md"]
    assert generated.data.timings_ms["total"] == response.json()["metadata"]["timings_ms"]["total"]


def test_a_broker_that_is_down_neither_fails_nor_slows_requests(unique, retrieval_url):
    settings = Settings(
        service_token=TOKEN,
        retrieval_url=retrieval_url,
        amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/",
        events_exchange=f"{unique}.events",
        analytics_queue=f"{unique}.analytics",
    )
    with serve_in_thread(create_app(settings)) as chat_url:
        durations = []
        for _ in range(3):
            started = time.monotonic()
            response = httpx.post(f"{chat_url}/chat", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)
            durations.append(time.monotonic() - started)
            assert response.status_code == 200, response.text
            assert "[1]" in response.json()["answer"]
        ready = httpx.get(f"{chat_url}/readyz", timeout=5)
    assert max(durations) < 1.5
    assert ready.status_code == 200  # the broker is not a readiness condition
