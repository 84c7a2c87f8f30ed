"""The gateway's API reference pages (/docs, /redoc) in a real browser cut off from every other origin:
Swagger UI and ReDoc come from the gateway itself and run under its Content-Security-Policy."""
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Browser, Route, expect

from services.gateway.main import create_app
from services.gateway.settings import Settings
from tests.support import free_port, serve_in_thread

pytestmark = pytest.mark.e2e

LOAD_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def gateway(redis_url, amqp_url) -> Iterator[str]:
    name = f"test-api-pages-{uuid.uuid4().hex[:10]}"
    settings = Settings(
        redis_url=redis_url, redis_prefix=name, amqp_url=amqp_url, chat_url=f"http://127.0.0.1:{free_port()}",
        events_exchange=f"{name}.events", analytics_queue=f"{name}.analytics",
    )
    with serve_in_thread(create_app(settings)) as url:
        yield url


def open_offline(browser: Browser, url: str) -> tuple[object, list[str]]:
    """A tab whose requests to any other origin fail, recording them, CSP violations and script errors."""
    page = browser.new_context().new_page()
    problems: list[str] = []
    own = urlparse(url).netloc

    def only_own_origin(route: Route) -> None:
        if urlparse(route.request.url).netloc in (own, ""):
            route.continue_()
        else:
            problems.append(f"request to another origin: {route.request.url}")
            route.abort()

    page.route("**/*", only_own_origin)
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(url)
    return page, problems


def test_swagger_ui_runs_from_the_gateway_alone(gateway, browser):
    page, problems = open_offline(browser, f"{gateway}/docs")
    expect(page.get_by_text("/api/chat/stream").first).to_be_visible(timeout=LOAD_TIMEOUT_MS)
    expect(page.get_by_text("Ask a question and receive the answer as Server-Sent Events").first).to_be_visible()
    assert problems == [], problems


def test_redoc_runs_from_the_gateway_alone(gateway, browser):
    page, problems = open_offline(browser, f"{gateway}/redoc")
    operation = page.get_by_role("heading", name=re.compile("Ask a question and receive the answer as Server-Sent Events"))
    expect(operation).to_be_visible(timeout=LOAD_TIMEOUT_MS)
    # ReDoc's footer links its maker's logo from cdn.redoc.ly; the policy stops it before any request leaves.
    logo = "Loading the image 'https://cdn.redoc.ly/redoc/logo-mini.svg' violates"
    assert [problem for problem in problems if not problem.startswith(logo)] == [], problems
