"""Schemathesis against the gateway's OpenAPI, logged in, with every check on, in front of the real
chat, retrieval and analytics apps (each served over HTTP) and the real Redis and RabbitMQ."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from services.analytics.main import create_app as create_analytics_app
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app as create_gateway_app
from services.gateway.settings import Settings as GatewaySettings
from services.gateway.users import add_user
from services.retrieval.main import create_app as create_retrieval_app
from services.retrieval.settings import Settings as RetrievalSettings
from tests.support import serve_in_thread

pytestmark = pytest.mark.integration

TOKEN = "gateway-contract-token"
PASSWORD = "contract password"
EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
# A login is needed for every case of these: they end the session that made the call.
SESSION_ENDING = {("POST", "/auth/logout"), ("DELETE", "/auth/sessions/{session_id}")}


def gateway_settings(**overrides) -> GatewaySettings:
    # Limits off: schemathesis's many failed logins from 127.0.0.1 would otherwise lock out the logins that
    # session-ending cases need (tests/integration/gateway/test_rate_limits.py holds the limits to account).
    return GatewaySettings(
        service_token=TOKEN, chat_requests_per_minute=0, login_attempts_per_ip=0, login_attempts_per_username=0,
        **overrides,
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory, embedder, redis_url, amqp_url) -> Iterator[str]:
    """The gateway's URL, with the three services behind it; one admin user, `ada`, who holds every role."""
    name = f"contract-{uuid.uuid4().hex[:12]}"
    data = tmp_path_factory.mktemp("gateway-contract")
    events = {"amqp_url": amqp_url, "events_exchange": f"{name}.events", "analytics_queue": f"{name}.analytics"}
    retrieval_settings = RetrievalSettings(service_token=TOKEN, data_dir=data / "retrieval", chroma_collection=name)
    with (
        serve_in_thread(create_retrieval_app(retrieval_settings, embedder=embedder)) as retrieval,
        serve_in_thread(create_analytics_app(AnalyticsSettings(service_token=TOKEN, data_dir=data, **events))) as analytics,
        serve_in_thread(
            create_chat_app(ChatSettings(service_token=TOKEN, retrieval_url=retrieval, redis_url=redis_url, redis_prefix=name, **events))
        ) as chat,
    ):
        asyncio.run(_seed_admin(redis_url, name))
        settings_ = gateway_settings(
            redis_url=redis_url, redis_prefix=name, chat_url=chat, retrieval_url=retrieval, analytics_url=analytics, **events
        )
        with serve_in_thread(create_gateway_app(settings_)) as gateway:
            httpx.post(
                f"{gateway}/api/documents", headers=login(gateway),
                json={"text": "# Users\n\nRun `cairn user add NAME` to add a user.", "source": "users.md"},
            ).raise_for_status()
            yield gateway


async def _seed_admin(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
    await add_user(users=users, username="ada", password=PASSWORD, roles=["admin"])
    await redis.aclose()


def login(gateway: str) -> dict[str, str]:
    response = httpx.post(f"{gateway}/auth/login", json={"username": "ada", "password": PASSWORD})
    response.raise_for_status()
    return {"Authorization": f"Bearer {response.json()['token']}"}


@pytest.fixture(scope="module")
def admin(stack) -> dict[str, str]:
    return login(stack)


# These routes pass their body on unread to chat or retrieval, whose own schemas say what it must be (checked
# in tests/integration/test_api_contracts.py); the gateway's image holds neither service's models, so its schema
# names no body and schemathesis sends none, which the service behind refuses (422, or 400 for an upload).
# For these operations only, 400 and 422 join the statuses that count as accepting schema-valid data
# (schemathesis's defaults otherwise); every other check stays as it is.
PASSED_ON_BODIES = [("POST", "/api/chat"), ("POST", "/api/chat/stream"), ("POST", "/api/search"), ("POST", "/api/documents")]
BODY_IS_THE_UPSTREAMS = SchemathesisConfig.from_dict(
    {
        "operations": [
            {
                "include-path": path,
                "include-method": method,
                "checks": {
                    "positive_data_acceptance": {
                        "expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx", "400", "422"]
                    }
                },
            }
            for method, path in PASSED_ON_BODIES
        ]
    }
)
gateway = schemathesis.openapi.from_dict(create_gateway_app(gateway_settings()).openapi(), config=BODY_IS_THE_UPSTREAMS)


@gateway.parametrize()
@EXAMPLES
def test_the_gateway_keeps_its_contract(case, stack, admin):
    ends_session = (case.method.upper(), case.path) in SESSION_ENDING
    case.call_and_validate(base_url=stack, headers=login(stack) if ends_session else admin)
