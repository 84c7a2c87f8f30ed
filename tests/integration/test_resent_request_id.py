"""A question refused by chat after chat recorded it, then sent again with the same X-Request-ID: the gateway
frees a refused question's request id, so the resend goes through, and the analytics service counts it once,
with the resend's outcome. The gateway and chat are real apps served over HTTP (retrieval a stand-in), the
analytics service a real process, all on the real Redis and RabbitMQ with names of the test's own."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from services.chat.main import create_app as create_chat
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway
from tests.integration.analytics.event_stream import AnalyticsProcess, delete_topology, stored_events
from tests.integration.chat.stand_ins import fake_retrieval_app
from tests.integration.gateway.chat_stand_in import PASSWORD, gateway_settings
from tests.support import serve_in_thread, wait_until

pytestmark = pytest.mark.integration

TOKEN = "resent-request-id-token"


@dataclass
class Stack:
    gateway_url: str
    analytics: AnalyticsProcess


@pytest.fixture
def stack(tmp_path: Path, redis_url: str, amqp_url: str, unique: str) -> Iterator[Stack]:
    events = {"amqp_url": amqp_url, "events_exchange": f"{unique}.events", "analytics_queue": f"{unique}.analytics"}
    analytics = AnalyticsProcess(
        data_dir=tmp_path / "analytics", amqp_url=amqp_url, exchange=events["events_exchange"],
        queue=events["analytics_queue"], token=TOKEN,
    )
    retrieval, _ = fake_retrieval_app()
    try:
        analytics.start()
        with serve_in_thread(retrieval) as retrieval_url:
            chat = create_chat(ChatSettings(
                service_token=TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, redis_prefix=unique,
                data_dir=tmp_path / "chat", events_linger_s=0, **events,
            ))
            with serve_in_thread(chat) as chat_url:
                gateway = create_gateway(gateway_settings(
                    redis_url=redis_url, prefix=unique, chat_url=chat_url, service_token=TOKEN,
                    analytics_url=analytics.url, data_dir=tmp_path / "gateway", **events,
                ))
                with serve_in_thread(gateway) as gateway_url:
                    yield Stack(gateway_url, analytics)
    finally:
        analytics.stop()
        asyncio.run(delete_topology(amqp_url, exchange=events["events_exchange"], queue=events["analytics_queue"]))


def _login(stack: Stack, username: str) -> dict[str, str]:
    response = httpx.post(f"{stack.gateway_url}/auth/login", json={"username": username, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def _ask(stack: Stack, auth: dict[str, str], request_id: str, **body) -> httpx.Response:
    return httpx.post(
        f"{stack.gateway_url}/api/chat", json={"query": "How do I add a user?", **body},
        headers={**auth, "X-Request-ID": request_id}, timeout=30,
    )


def test_a_refused_question_sent_again_with_its_request_id_counts_once_with_the_later_outcome(
    stack: Stack, unique: str
) -> None:
    bobs = _ask(stack, _login(stack, "bob"), f"{unique}-bob")
    assert bobs.status_code == 200, bobs.text
    ann = _login(stack, "ann")
    request_id = f"{unique}-resent"

    refused = _ask(stack, ann, request_id, conversation_id=bobs.json()["conversation_id"])
    assert refused.status_code == 404 and refused.json()["error"] == "conversation_not_found", refused.text
    answered = _ask(stack, ann, request_id)
    assert answered.status_code == 200, answered.text
    assert answered.json()["metadata"]["request_id"] == request_id

    # Both of Ann's tries reach analytics, each event stored once (QuerySubmitted and QueryFailed, then
    # QuerySubmitted and ResponseGenerated), after Bob's question and answer.
    wait_until(lambda: len(stored_events(stack.analytics.database_url)) == 6, timeout=30,
               what="the events of both tries in analytics")
    admin = _login(stack, "ada")
    summary = httpx.get(f"{stack.gateway_url}/api/analytics/summary", headers=admin, timeout=10)
    assert summary.status_code == 200, summary.text
    figures = summary.json()
    assert (figures["queries"], figures["completed"], figures["answered"], figures["failed"]) == (2, 2, 2, 0), figures
    assert figures["failures_by_stage"] == {}
