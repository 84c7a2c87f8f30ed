"""/readyz of a service that calls others, when those refuse its CAIRN_SERVICE_TOKEN: every request it sent
would fail, so it must leave its load balancer, naming the service that refuses it. The services called
are the real chat and retrieval apps over real HTTP (retrieval with the unit tests' embedder and store)."""
from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from services.analytics.main import create_app as create_analytics
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.main import create_app as create_chat
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway
from services.retrieval.main import create_app as create_retrieval
from services.retrieval.settings import Settings as RetrievalSettings
from tests.integration.analytics.test_analytics_consumer import delete_topology, eventually
from tests.integration.gateway.chat_stand_in import gateway_settings
from tests.support import free_port, serve_in_thread
from tests.unit.chat.fakes import ListPublisher
from tests.unit.retrieval.fakes import FakeEmbedder, FakeStore

pytestmark = pytest.mark.integration
TOKEN = "the-deployed-token"
OTHER = "a-token-from-an-older-secret"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Retrieval, and chat calling it, both deployed with TOKEN."""
    data = tmp_path_factory.mktemp("token-readiness")
    retrieval_settings = RetrievalSettings(service_token=TOKEN, data_dir=data)
    with ExitStack() as stack:
        retrieval = stack.enter_context(
            serve_in_thread(create_retrieval(retrieval_settings, embedder=FakeEmbedder(), store=FakeStore()))
        )
        chat_settings = ChatSettings(service_token=TOKEN, retrieval_urls=retrieval, data_dir=data)
        chat = stack.enter_context(serve_in_thread(create_chat(chat_settings, publisher=ListPublisher())))
        yield {"retrieval": retrieval, "chat": chat}


def gateway_readiness(services: dict[str, str], redis_url: str, unique: str, token: str) -> httpx.Response:
    settings = gateway_settings(
        redis_url=redis_url, prefix=unique, chat_url=services["chat"], retrieval_urls=[services["retrieval"]],
        service_token=token,
    )
    with TestClient(create_gateway(settings)) as client:
        return client.get("/readyz")


def test_a_gateway_whose_token_chat_and_retrieval_refuse_is_not_ready(services, redis_url, unique):
    ready = gateway_readiness(services, redis_url, unique, OTHER)
    checks = ready.json()["checks"]
    assert (ready.status_code, ready.json()["status"]) == (503, "not_ready")
    assert (checks["chat"], checks["chat_service_token"]) == (True, False)
    assert (checks["retrieval"], checks["retrieval_service_token"]) == (True, False)
    # Analytics is down here: a service that does not answer refuses nothing, and stays only reported.
    assert (checks["analytics"], checks["analytics_service_token"]) == (False, True)


def test_a_gateway_with_the_token_of_its_upstreams_is_ready_with_one_of_them_down(services, redis_url, unique):
    ready = gateway_readiness(services, redis_url, unique, TOKEN)
    checks = ready.json()["checks"]
    assert ready.status_code == 200, ready.text
    assert checks["chat_service_token"] and checks["retrieval_service_token"] and checks["analytics"] is False


def test_a_gateway_is_ready_while_one_chat_replica_of_two_accepts_its_token(services, redis_url, unique, tmp_path):
    """The replica with the other token is the one misconfigured: the gateway keeps serving through the other."""
    odd_settings = ChatSettings(service_token=OTHER, retrieval_urls=services["retrieval"], data_dir=tmp_path)
    with serve_in_thread(create_chat(odd_settings, publisher=ListPublisher())) as odd_chat:
        settings = gateway_settings(
            redis_url=redis_url, prefix=unique, chat_url=f"{services['chat']},{odd_chat}",
            retrieval_urls=[services["retrieval"]], service_token=TOKEN,
        )
        with TestClient(create_gateway(settings)) as client:
            ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["chat_service_token"] is True


@pytest.mark.parametrize(("token", "status", "accepted"), [(OTHER, 503, False), (TOKEN, 200, True)])
def test_chat_is_not_ready_when_retrieval_refuses_its_token(services, tmp_path, token, status, accepted):
    settings = ChatSettings(service_token=token, retrieval_urls=services["retrieval"], data_dir=tmp_path)
    with TestClient(create_chat(settings, publisher=ListPublisher())) as client:
        ready = client.get("/readyz")
    assert (ready.status_code, ready.json()["checks"]["retrieval"]) == (status, True)
    assert ready.json()["checks"]["retrieval_service_token"] is accepted


@pytest.mark.parametrize(("token", "status", "accepted"), [(OTHER, 503, False), (TOKEN, 200, True)])
async def test_analytics_is_not_ready_when_retrieval_refuses_its_token(
    services, tmp_path: Path, amqp_url, unique, token, status, accepted
):
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    settings = AnalyticsSettings(
        service_token=token, data_dir=tmp_path, amqp_url=amqp_url, retrieval_url=services["retrieval"],
        events_exchange=names["exchange"], analytics_queue=names["queue"],
    )
    app = create_analytics(settings)
    try:
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://analytics") as client:

                async def broker_connected() -> bool:
                    return (await client.get("/readyz")).json()["checks"]["broker"]

                await eventually(broker_connected, what="analytics to reach the broker")
                ready = await client.get("/readyz")
    finally:
        await delete_topology(amqp_url, **names)
    checks = ready.json()["checks"]
    assert (ready.status_code, checks["database"], checks["retrieval"]) == (status, True, True)
    assert checks["retrieval_service_token"] is accepted


def test_healthz_says_whether_a_presented_token_is_the_services_own(services):
    chat = services["chat"]
    assert httpx.get(f"{chat}/healthz", headers={"X-Service-Token": TOKEN}).json()["service_token"] == "accepted"
    assert httpx.get(f"{chat}/healthz", headers={"X-Service-Token": OTHER}).json()["service_token"] == "refused"
    assert "service_token" not in httpx.get(f"{chat}/healthz").json(), "liveness probes present no token"


def test_the_public_gateway_healthz_answers_nothing_about_tokens(redis_url, unique):
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=f"http://127.0.0.1:{free_port()}")
    with TestClient(create_gateway(settings)) as client:
        health = client.get("/healthz", headers={"X-Service-Token": settings.service_token.get_secret_value()})
    assert health.json() == {"status": "ok", "service": "gateway"}


def test_a_gateway_answers_readyz_within_its_probe_timeout_while_every_upstream_is_silent(redis_url, unique):
    """Each upstream's probe may wait 2 s; Kubernetes gives /readyz 3 s (deploy/k8s/gateway.yaml)."""
    with ExitStack() as stack:
        silent = []
        for _ in range(3):  # listening, never accepting: connections open, and no answer ever comes
            listener = stack.enter_context(socket.socket())
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            silent.append(f"http://127.0.0.1:{listener.getsockname()[1]}")
        settings = gateway_settings(
            redis_url=redis_url, prefix=unique, chat_url=silent[0], retrieval_urls=[silent[1]], analytics_url=silent[2]
        )
        with TestClient(create_gateway(settings)) as client:
            started = time.monotonic()
            ready = client.get("/readyz")
            elapsed = time.monotonic() - started
    assert ready.status_code == 200 and elapsed < 3, elapsed
    assert {name: ready.json()["checks"][name] for name in ("chat", "retrieval", "analytics")} == dict.fromkeys(
        ("chat", "retrieval", "analytics"), False
    )
