"""How every service's process is served: the options shared.web.serve hands to uvicorn."""
import pytest
import uvicorn

from shared.web import SERVER_OPTIONS

pytestmark = pytest.mark.unit


def test_a_platforms_web_concurrency_does_not_fork_workers(monkeypatch):
    # Heroku-style platforms set WEB_CONCURRENCY, and uvicorn reads it when it is given no worker count.
    # Each worker would keep its own metrics (a scrape reaches one of them at random), its own circuit
    # breaker, and share one outbox file with the others; replicas are what scales a Cairn service.
    monkeypatch.setenv("WEB_CONCURRENCY", "4")
    config = uvicorn.Config("services.gateway.main:create_app", factory=True, host="127.0.0.1", port=0, **SERVER_OPTIONS)
    assert config.workers == 1
