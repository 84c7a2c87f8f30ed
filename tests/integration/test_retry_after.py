"""Every 503 a client gets says when to try again (Retry-After, RFC 9110 10.2.3), over real HTTP: the
gateway's own, chat's relayed by the gateway (Cairn's shape and OpenAI's), chat's while its breaker is
open (the time left until it lets a trial through), and the time analytics or a proxy sent, relayed as sent
where the gateway rewrites the error."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from services.analytics.errors import DatabaseBusy
from services.chat.main import create_app as create_chat
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway
from shared.errors import RETRY_AFTER_S
from shared.web import create_service_app
from tests.integration.chat.stand_ins import HEADERS, TOKEN
from tests.integration.gateway.chat_stand_in import PASSWORD, gateway_settings
from tests.support import free_port, serve_in_thread
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration

QUESTION = {"query": "How do I add a user?"}
COMPLETION = {"model": "cairn", "messages": [{"role": "user", "content": "How do I add a user?"}]}


def _nowhere() -> str:
    return f"http://127.0.0.1:{free_port()}"


def _chat(redis_url: str, unique: str, **overrides) -> ChatSettings:
    """Chat with retrieval down (nothing listens at its address)."""
    return ChatSettings(
        service_token=TOKEN, redis_url=redis_url, redis_prefix=unique, retrieval_url=_nowhere(), **overrides
    )


def _login(gateway: str) -> dict[str, str]:
    response = httpx.post(f"{gateway}/auth/login", json={"username": "ann", "password": PASSWORD}, timeout=10)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


@pytest.fixture
def gateway_before_chat(redis_url, unique) -> Iterator[str]:
    """A gateway in front of a real chat whose retrieval is down."""
    with serve_in_thread(create_chat(_chat(redis_url, unique), publisher=ListPublisher())) as chat_url:
        settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=chat_url, service_token=TOKEN)
        with serve_in_thread(create_gateway(settings)) as url:
            yield url


def test_chats_503_reaches_the_client_with_retry_after_on_api_and_v1(gateway_before_chat):
    auth = _login(gateway_before_chat)
    api = httpx.post(f"{gateway_before_chat}/api/chat", json=QUESTION, headers=auth, timeout=30)
    assert api.status_code == 503 and api.json()["error"] == "retrieval_unavailable", api.text
    assert api.headers["retry-after"] == str(RETRY_AFTER_S)

    v1 = httpx.post(f"{gateway_before_chat}/v1/chat/completions", json=COMPLETION, headers=auth, timeout=30)
    assert v1.status_code == 503 and v1.json()["error"]["code"] == "retrieval_unavailable", v1.text
    assert v1.headers["retry-after"] == str(RETRY_AFTER_S)


def test_an_open_breaker_says_how_long_until_it_lets_a_trial_through(redis_url, unique):
    settings = _chat(redis_url, unique, retrieval_breaker_failures=1, retrieval_breaker_cooldown_s=30)
    with serve_in_thread(create_chat(settings, publisher=ListPublisher())) as chat_url:
        opened = httpx.post(f"{chat_url}/chat", json=QUESTION, headers=HEADERS, timeout=30)
        paused = httpx.post(f"{chat_url}/chat", json=QUESTION, headers=HEADERS, timeout=30)
    assert opened.status_code == 503 and opened.headers["retry-after"] == str(RETRY_AFTER_S)
    assert paused.status_code == 503
    assert paused.json() == {"error": "retrieval_unavailable", "message": "retrieval is failing; calls are paused while it recovers"}
    assert 25 <= int(paused.headers["retry-after"]) <= 30


def test_the_gateways_own_503s_carry_retry_after(redis_url, unique):
    """Chat and analytics down: nothing listens at their addresses."""
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=_nowhere())
    with serve_in_thread(create_gateway(settings)) as gateway:
        auth = _login(gateway)
        answers = {
            "/api/chat": httpx.post(f"{gateway}/api/chat", json=QUESTION, headers=auth, timeout=10),
            "/v1/models": httpx.get(f"{gateway}/v1/models", headers=auth, timeout=10),
        }
    for path, response in answers.items():
        assert response.status_code == 503 and "chat_unavailable" in response.text, (path, response.text)
        assert response.headers["retry-after"] == str(RETRY_AFTER_S), path


def _busy_analytics():
    """Analytics answering every report as its pool does when every connection stays in use."""
    app = create_service_app(service="analytics", title="busy analytics")

    @app.get("/analytics/{report}")
    async def report(report: str) -> None:
        raise DatabaseBusy()

    return app


@pytest.mark.parametrize("report", ["summary", "export.csv"])
def test_analytics_retry_after_is_relayed_as_sent(redis_url, unique, report):
    with serve_in_thread(_busy_analytics()) as analytics_url:
        settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=_nowhere(), analytics_url=analytics_url)
        with serve_in_thread(create_gateway(settings)) as gateway:
            ada = httpx.post(f"{gateway}/auth/login", json={"username": "ada", "password": PASSWORD}, timeout=10)
            auth = {"Authorization": f"Bearer {ada.json()['token']}"}
            response = httpx.get(f"{gateway}/api/analytics/{report}", headers=auth, timeout=10)
    assert response.status_code == 503 and response.json()["error"] == "analytics_unavailable", response.text
    assert response.headers["retry-after"] == str(DatabaseBusy.RETRY_AFTER_S)


def test_analytics_down_is_a_503_with_the_default_retry_after(redis_url, unique):
    settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=_nowhere())
    with serve_in_thread(create_gateway(settings)) as gateway:
        ada = httpx.post(f"{gateway}/auth/login", json={"username": "ada", "password": PASSWORD}, timeout=10)
        auth = {"Authorization": f"Bearer {ada.json()['token']}"}
        response = httpx.get(f"{gateway}/api/analytics/summary", headers=auth, timeout=10)
    assert response.status_code == 503 and response.headers["retry-after"] == str(RETRY_AFTER_S)


def _proxy_page_without_replicas():
    """What a proxy in front of retrieval answers when no replica is behind it: an HTML 503 with its own time."""
    app = FastAPI()

    @app.post("/search")
    async def search() -> HTMLResponse:
        return HTMLResponse("<h1>503 Service Unavailable</h1>", status_code=503, headers={"Retry-After": "7"})

    return app


def test_a_proxys_retry_after_survives_its_page_being_replaced(redis_url, unique):
    with serve_in_thread(_proxy_page_without_replicas()) as proxy:
        settings = gateway_settings(redis_url=redis_url, prefix=unique, chat_url=_nowhere(), retrieval_urls=[proxy])
        with serve_in_thread(create_gateway(settings)) as gateway:
            response = httpx.post(f"{gateway}/api/search", json=QUESTION, headers=_login(gateway), timeout=10)
    assert response.status_code == 503 and response.json()["error"] == "retrieval_unavailable", response.text
    assert response.headers["retry-after"] == "7"
