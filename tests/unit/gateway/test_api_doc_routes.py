"""docs/api.md and the gateway's routes agree: every route of the gateway's OpenAPI is named in the guide as
`METHOD /path`, and every `METHOD /path` the guide names is served, by the gateway or, when the guide
says whose it is ("chat's `POST /chat`"), by that internal service."""
import re
from pathlib import Path

import pytest
from starlette.routing import Match

from services.chat.main import create_app as create_chat
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.main import create_app as create_retrieval
from services.retrieval.settings import Settings as RetrievalSettings
from tests.support import app_routes

pytestmark = pytest.mark.unit
GUIDE = Path(__file__).parents[3] / "docs" / "api.md"
# "chat's `POST /chat`": an owner, then a method and a path, which ends at a space, backquote or punctuation.
NAMED_ROUTE = re.compile(r"(?:\b(\w+)'s )?`?\b(GET|HEAD|POST|PUT|PATCH|DELETE) +(/[^\s`,;)\]?]*)")
# A path parameter as the OpenAPI writes it ({doc_id}) or as the guide does ({id}, DOC_ID).
PARAMETER = re.compile(r"^(\{\w+\}|[A-Z][A-Z_]*)$")


def named_routes(text: str) -> set[tuple[str, str, str]]:
    """(owner, method, path) for every route the text names; the owner is "gateway" unless it says another."""
    return {(owner or "gateway", method, path.rstrip(".:")) for owner, method, path in NAMED_ROUTE.findall(text)}


def shape(path: str) -> str:
    return "/".join("{}" if PARAMETER.match(part) else part for part in path.split("/"))


def serves(app, method: str, path: str) -> bool:
    """Whether a request for `path`, its parameters given some value, reaches a route of `app` that takes `method`."""
    concrete = "/".join("x" if PARAMETER.match(part) else part for part in path.split("/"))
    scope = {"type": "http", "path": concrete, "root_path": "", "method": method, "headers": []}
    return any(route.matches(scope)[0] is Match.FULL for route in app_routes(app))


@pytest.fixture(scope="module")
def gateway():
    return create_gateway(GatewaySettings())


def test_every_gateway_route_is_in_the_api_guide(gateway):
    named = {(method, shape(path)) for owner, method, path in named_routes(GUIDE.read_text()) if owner == "gateway"}
    served = {(method.upper(), path) for path, item in gateway.openapi()["paths"].items() for method in item}
    missing = sorted(f"{method} {path}" for method, path in served if (method, shape(path)) not in named)
    assert not missing, f"docs/api.md does not name these routes as `METHOD /path`: {missing}"


def test_every_route_the_api_guide_names_is_served(gateway):
    apps = {"gateway": gateway, "chat": create_chat(ChatSettings()), "retrieval": create_retrieval(RetrievalSettings())}
    named = named_routes(GUIDE.read_text())
    unknown = sorted(f"{owner}: {method} {path}" for owner, method, path in named if owner not in apps)
    assert not unknown, f"docs/api.md names routes of services this test does not know: {unknown}"
    stale = sorted(f"{owner}: {method} {path}"
                   for owner, method, path in named if not serves(apps[owner], method, path))
    assert not stale, f"docs/api.md names routes that are not served: {stale}"


def test_the_guide_is_read_as_it_writes_routes():
    text = "call `DELETE /auth/sessions/ID`. chat's `POST /chat`, then GET /api/documents/DOC_ID/similar?top_k=5."
    assert named_routes(text) == {
        ("gateway", "DELETE", "/auth/sessions/ID"),
        ("chat", "POST", "/chat"),
        ("gateway", "GET", "/api/documents/DOC_ID/similar"),
    }
    assert shape("/auth/sessions/{session_id}") == shape("/auth/sessions/ID") == "/auth/sessions/{}"
