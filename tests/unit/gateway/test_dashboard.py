"""The dashboard page and its chart library as the gateway serves them, with a fake session store:
who gets the page, its Content-Security-Policy, and plotly.min.js from the installed plotly package."""
from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from services.gateway import auth
from services.gateway.dashboard import DASHBOARD_CSP
from services.gateway.main import create_app
from services.gateway.middleware import PAGE_CSP
from services.gateway.settings import Settings
from services.gateway.users import add_user
from services.gateway.web_page import WEB_DIR, plotly_path
from tests.unit.gateway.fakes import FakeSessionStore, FakeUserStore

pytestmark = pytest.mark.unit
PASSWORD = "correct horse"
ROLES = {"ann": "user", "ana": "analyst", "ada": "admin"}


@pytest.fixture(scope="module")
def stores() -> tuple[FakeUserStore, FakeSessionStore]:
    users = FakeUserStore()
    for name, role in ROLES.items():
        asyncio.run(add_user(users=users, username=name, password=PASSWORD, roles=[role]))
    return users, FakeSessionStore()


@pytest.fixture(scope="module")
def client(stores) -> TestClient:
    app = create_app(Settings())  # no lifespan: the fakes stand in for Redis, nothing is forwarded
    app.state.users, app.state.sessions = stores
    return TestClient(app)


@pytest.fixture(scope="module")
def bearer(stores):
    users, sessions = stores

    def of(username: str) -> dict[str, str]:
        token, _, _ = asyncio.run(
            auth.login(users=users, sessions=sessions, username=username, password=PASSWORD, ttl_s=600, max_age_s=3600)
        )
        return {"Authorization": f"Bearer {token}"}

    return of


def _is_the_page(response) -> None:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert 'data-testid="dashboard"' in response.text
    assert response.headers["content-security-policy"] == DASHBOARD_CSP
    assert response.headers["x-frame-options"] == "DENY" and response.headers["cache-control"] == "no-cache"


def test_without_a_token_the_page_is_served_and_asks_for_a_log_in(client):
    response = client.get("/dashboard")
    _is_the_page(response)
    assert 'id="login-form"' in response.text


def test_a_head_request_gets_the_page_s_headers_without_its_body(client, bearer):
    head = client.head("/dashboard")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-security-policy"] == DASHBOARD_CSP
    assert head.headers["content-length"] == client.get("/dashboard").headers["content-length"]
    assert client.head("/dashboard", headers=bearer("ann")).status_code == 403


@pytest.mark.parametrize("username", ["ana", "ada"])
def test_analysts_and_admins_get_the_page_with_their_bearer(client, bearer, username):
    _is_the_page(client.get("/dashboard", headers=bearer(username)))


def test_a_plain_user_s_bearer_is_refused_with_403(client, bearer):
    response = client.get("/dashboard", headers=bearer("ann"))
    assert response.status_code == 403
    assert response.json() == {"error": "forbidden", "message": "the dashboard is for analysts only"}


@pytest.mark.parametrize("header", ["Bearer not-a-session", "Basic YW5hOnB3", "Bearer "])
def test_a_bad_authorization_header_is_401(client, header):
    response = client.get("/dashboard", headers={"Authorization": header})
    assert response.status_code == 401 and response.json()["error"] == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"


def test_the_session_store_down_is_503_for_a_bearer_but_the_bare_page_needs_no_store(client, bearer, stores):
    headers = bearer("ana")
    stores[1].down = True
    try:
        refused = client.get("/dashboard", headers=headers)
        bare = client.get("/dashboard")
    finally:
        stores[1].down = False
    assert refused.status_code == 503 and refused.json()["error"] == "session_store_unavailable"
    _is_the_page(bare)


def test_the_page_is_served_at_dashboard_only(client):
    assert client.get("/web/dashboard.html").status_code == 404
    paths = client.get("/openapi.json").json()["paths"]
    assert "/dashboard" not in paths and "/web/vendor/plotly.min.js" not in paths


def test_the_policy_differs_from_the_chat_page_s_only_by_inline_styles_for_plotly():
    assert DASHBOARD_CSP == PAGE_CSP.replace("style-src 'self';", "style-src 'self' 'unsafe-inline';")
    assert "script-src 'self';" in DASHBOARD_CSP and "unsafe-eval" not in DASHBOARD_CSP


def test_plotly_is_served_from_the_installed_package_and_revalidated_with_304(client):
    response = client.get("/web/vendor/plotly.min.js")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    assert response.content == plotly_path().read_bytes() and b"window.Plotly" in response.content
    assert len(response.content) > 1_000_000

    again = client.get("/web/vendor/plotly.min.js", headers={"If-None-Match": response.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == response.headers["etag"]
    stale = client.get("/web/vendor/plotly.min.js", headers={"If-None-Match": '"something-else"'})
    assert stale.status_code == 200 and len(stale.content) == len(response.content)


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.testids: set[str] = set()
        self.inline = {"script": 0, "style": 0, "style_attribute": 0}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v and not v.startswith("#")]
        self.testids |= {attributes["data-testid"]} if attributes.get("data-testid") else set()
        self.inline["script"] += tag == "script" and not attributes.get("src")
        self.inline["style"] += tag == "style"
        self.inline["style_attribute"] += "style" in attributes


def test_every_asset_of_the_page_is_local_and_served_with_its_type(client):
    page = _Refs()
    page.feed(client.get("/dashboard").text)
    assert page.inline == {"script": 0, "style": 0, "style_attribute": 0}
    assert {"/web/dashboard.js", "/web/dashboard.css", "/web/style.css"} <= set(page.urls)
    for url in page.urls:
        assert not urlsplit(url).netloc, url
        response = client.get(url)
        assert response.status_code == 200, url


def test_the_module_graph_of_dashboard_js_is_local(client):
    seen, queue = set(), ["dashboard.js"]
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        response = client.get(f"/web/{name}")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/javascript"), name
        for spec in re.findall(r"""^import\s[^;]*?from\s+["']([^"']+)["']""", response.text, flags=re.M):
            assert spec.startswith("./") and "/" not in spec[2:], f"{name} imports {spec}"
            queue.append(spec[2:])
    assert {"dashboard.js", "api.js", "dashboard-charts.js", "dashboard-plot.js", "dashboard-tiles.js"} <= seen


def test_every_figure_the_tests_read_has_a_stable_test_id(client):
    page = _Refs()
    page.feed(client.get("/dashboard").text)
    charts = {f"chart-{name}" for name in ("volume", "latency", "answer-rate", "confidence", "top-queries", "gaps", "documents")}
    kpis = {f"kpi-{name}" for name in (
        "queries", "distinct-users", "answered-rate", "no-answer-rate", "failure-rate", "latency-p50", "latency-p95",
        "latency-p99", "mean-citations", "supported-citation-rate", "feedback-score", "tokens",
    )}
    others = {"analysts-only", "range", "model", "export-csv", "models-table", "feedback-list", "status"}
    assert charts | kpis | others <= page.testids
    assert not re.search(r"https?://", (WEB_DIR / "dashboard.html").read_text())


class _ModelColumns(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.in_table = self.in_header = False
        self.columns: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.in_table |= tag == "table" and ("data-testid", "models-table") in attrs
        if self.in_table and tag == "th":
            self.in_header, self.columns = True, [*self.columns, ""]

    def handle_endtag(self, tag: str) -> None:
        self.in_header &= tag != "th"
        self.in_table &= tag != "table"

    def handle_data(self, data: str) -> None:
        if self.in_header:
            self.columns[-1] += data


def test_the_models_table_names_its_tokens_column_as_the_report_and_the_guide_do(client):
    table = _ModelColumns()
    table.feed(client.get("/dashboard").text)
    assert table.columns == [
        "Model", "Requests", "Share", "p50 (ms)", "p95 (ms)", "p99 (ms)", "Prompt tokens", "Completion tokens",
        "Tokens per response",  # the report's mean_total_tokens: total tokens per response of the model
        "Cost (USD)",  # the report's cost_usd
    ]
    guide = (WEB_DIR.parents[2] / "docs" / "dashboard.md").read_text()
    assert '"Tokens per response"' in guide and "tokens per request" not in guide.lower()
