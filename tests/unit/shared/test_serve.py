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


@pytest.mark.parametrize(("service", "longer_than_its_callers"), [("gateway", True), ("chat", False), ("retrieval", False)])
def test_a_service_keeps_idle_connections_longer_than_whoever_calls_it(monkeypatch, service, longer_than_its_callers):
    # Whoever keeps a connection idle longer than the server does may send a request as the server closes it,
    # and that request is lost. Cairn's own clients drop theirs after CLIENT_KEEP_ALIVE_S; the proxies in
    # front of the gateway keep theirs 60 s by default (nginx, ingress-nginx, AWS's load balancers).
    import runpy

    from shared import web

    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.update(options))
    monkeypatch.setenv("CAIRN_ENV", "local")
    runpy.run_module(f"services.{service}", run_name="__main__")
    assert served["timeout_keep_alive"] > web.CLIENT_KEEP_ALIVE_S
    assert (served["timeout_keep_alive"] > 60) is longer_than_its_callers
