"""How every service's process is served: the options shared.web.serve hands to uvicorn."""
import re
from pathlib import Path

import pytest
import uvicorn

from shared import server, web
from shared.web import SERVER_OPTIONS

ROOT = Path(__file__).resolve().parents[3]

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

    served = {}
    monkeypatch.setattr(server, "run", lambda config: served.update(timeout_keep_alive=config.timeout_keep_alive))
    monkeypatch.setenv("CAIRN_ENV", "local")
    runpy.run_module(f"services.{service}", run_name="__main__")
    assert served["timeout_keep_alive"] > web.CLIENT_KEEP_ALIVE_S
    assert (served["timeout_keep_alive"] > 60) is longer_than_its_callers


# (guide, the sentence that states an idle time, in the words each guide uses, with the number as a group)
IDLE_TIMES_STATED = [
    ("docs/operations.md", r"close a kept-alive connection after (\d+) seconds without a request", "SERVER_KEEP_ALIVE_S"),
    ("docs/operations.md", r"close their own idle connections after (\d+) seconds", "CLIENT_KEEP_ALIVE_S"),
    ("docs/operations.md", r"public port keeps an idle connection for (\d+) seconds", "PUBLIC_KEEP_ALIVE_S"),
    ("deploy/README.md", r"an idle connection is closed after (\d+) seconds", "CLIENT_KEEP_ALIVE_S"),
    ("deploy/README.md", r"until that connection has been idle for (\d+) seconds", "CLIENT_KEEP_ALIVE_S"),
]


@pytest.mark.parametrize(("guide", "sentence", "constant"), IDLE_TIMES_STATED)
def test_the_guides_state_the_idle_times_the_services_use(guide, sentence, constant):
    # How long a kept-alive connection stays with one replica decides how requests spread over replicas
    # behind one Compose or Service name: an operator reading the guides must get the code's figure.
    text = " ".join((ROOT / guide).read_text().split())
    stated = [int(number) for number in re.findall(sentence, text)]
    assert stated, f"{guide} no longer says {sentence!r}: update this test with the guide's new words"
    assert set(stated) == {getattr(web, constant)}, f"{guide}: {sentence!r} says {stated}, the code {constant}"
