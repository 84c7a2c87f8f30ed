"""Who may call which route of the gateway, route by route: every route of the app is called over HTTP,
on a gateway with the real Redis, with no token, a bad token and a token of each role, and the answer is
checked against ACCESS, the table of "Roles" in docs/users-and-roles.md (and docs/dashboard.md for the page).
A route that ACCESS does not name fails the test, so no new route goes out with rights nobody chose.

Only the decision on the caller matters here: 401 or 403, or anything else. The internal services are
unreachable addresses, so a caller that gets through is answered 503 (or 4xx for the empty body) instead."""
import re
from pathlib import Path

import httpx
import pytest
from starlette.routing import Mount

from services.gateway.main import create_app
from services.gateway.roles import ROLES
from services.gateway.settings import Settings
from tests.integration.gateway.analytics_stand_in import PASSWORD, seed_users
from tests.integration.gateway.analytics_stand_in import ROLES as USERS  # ann (user), ana (analyst), ada (admin)
from tests.support import app_routes, free_port, serve_in_thread

ROLES_GUIDE = Path(__file__).parents[3] / "docs" / "users-and-roles.md"

pytestmark = pytest.mark.integration

PUBLIC = "anyone, token or not"
# /dashboard: the page is public, since a browser sends it no token; a client that does send one gets
# 401 for a bad token and 403 without the analyst role (docs/dashboard.md).
ANALYST_PAGE = "anyone without a token; with one, an analyst"
# Every route needing a log-in, by the least role that may call it; each role includes those before it.
USER, ANALYST, ADMIN = ROLES

ACCESS = {
    ("GET", "/healthz"): PUBLIC,
    ("HEAD", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("HEAD", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/openapi.json"): PUBLIC,
    ("HEAD", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("GET", "/docs/oauth2-redirect"): PUBLIC,
    ("GET", "/docs/assets"): PUBLIC,
    ("GET", "/redoc"): PUBLIC,
    ("GET", "/"): PUBLIC,
    ("HEAD", "/"): PUBLIC,
    ("GET", "/web/{name}"): PUBLIC,
    ("GET", "/web/vendor/plotly.min.js"): PUBLIC,
    ("GET", "/dashboard"): ANALYST_PAGE,
    ("HEAD", "/dashboard"): ANALYST_PAGE,
    ("POST", "/auth/login"): PUBLIC,
    ("POST", "/auth/logout"): USER,
    ("GET", "/auth/me"): USER,
    ("GET", "/auth/sessions"): USER,
    ("DELETE", "/auth/sessions/{session_id}"): USER,
    ("POST", "/auth/password"): USER,
    ("POST", "/api/chat"): USER,
    ("POST", "/api/chat/stream"): USER,
    ("POST", "/api/search"): USER,
    ("POST", "/api/feedback"): USER,
    ("GET", "/api/documents"): ADMIN,
    ("POST", "/api/documents"): ADMIN,
    ("GET", "/api/documents/{doc_id:path}"): ADMIN,
    ("DELETE", "/api/documents/{doc_id:path}"): ADMIN,
    ("GET", "/api/analytics/{report}"): ANALYST,
    ("GET", "/api/users"): ADMIN,
    ("POST", "/api/users"): ADMIN,
    ("GET", "/api/users/{username}"): ADMIN,
    ("PATCH", "/api/users/{username}"): ADMIN,
    ("DELETE", "/api/users/{username}"): ADMIN,
    ("PUT", "/api/users/{username}/password"): ADMIN,
    ("GET", "/v1/models"): USER,
    ("GET", "/v1/models/{model:path}"): USER,
    ("POST", "/v1/chat/completions"): USER,
}

# A value for each path parameter, so that the request reaches the route it is meant for.
SAMPLES = {
    "name": "app.js", "session_id": "0123456789abcdef", "doc_id": "d1", "report": "summary", "model": "cairn",
    "username": "nobody",
}
MOUNT_SAMPLES = {"/docs/assets": "swagger-ui.css"}
CALLERS = ("no token", "bad token", *USERS)
PASSES = "neither 401 nor 403"


def expected(access: str, caller: str) -> int | str:
    if access == PUBLIC or (access == ANALYST_PAGE and caller == "no token"):
        return PASSES
    if caller in ("no token", "bad token"):
        return 401
    needed = ANALYST if access == ANALYST_PAGE else access
    return PASSES if ROLES.index(USERS[caller]) >= ROLES.index(needed) else 403


def route_methods(app) -> list[tuple[str, str, str]]:
    """(method, path template, a URL of it) for every route of the app."""
    found = []
    for route in app_routes(app):
        if isinstance(route, Mount):
            sample = MOUNT_SAMPLES.get(route.path)
            found.append(("GET", route.path, f"{route.path}/{sample}" if sample else route.path))
            continue
        url = re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: SAMPLES.get(m[1], f"<no sample for {m[1]}>"), route.path)
        found.extend((method, route.path, url) for method in sorted(route.methods))
    return found


@pytest.fixture
def settings(redis_url, unique, tmp_path: Path) -> Settings:
    seed_users(redis_url, unique)
    nowhere = f"http://127.0.0.1:{free_port()}"
    return Settings(
        redis_url=redis_url,
        redis_prefix=unique,
        chat_url=nowhere,
        retrieval_url=nowhere,
        analytics_url=nowhere,
        upstream_timeout_s=2,
        events_exchange=unique,
        analytics_queue=unique,
        outbox_path=tmp_path / "outbox.sqlite3",
    )


class Tokens:
    """A live token per user: one the route under test ended (a logout) is replaced before the next call."""

    def __init__(self, http: httpx.Client) -> None:
        self.http, self.tokens = http, {}

    def __getitem__(self, username: str) -> str:
        token = self.tokens.get(username)
        if token is None or self.http.get("/auth/me", headers=_bearer(token)).status_code != 200:
            response = self.http.post("/auth/login", json={"username": username, "password": PASSWORD})
            assert response.status_code == 200, response.text
            token = self.tokens[username] = response.json()["token"]
        return token


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _headers(caller: str, tokens: Tokens) -> dict[str, str]:
    if caller == "no token":
        return {}
    return _bearer("not-a-token-of-anyone" if caller == "bad token" else tokens[caller])


def test_every_route_admits_exactly_the_callers_the_docs_name(settings):
    app = create_app(settings)
    routes = route_methods(app)
    unlisted = sorted({(method, path) for method, path, _ in routes} - set(ACCESS))
    assert not unlisted, f"routes missing from ACCESS (say who may call them, in the docs too): {unlisted}"
    gone = sorted(set(ACCESS) - {(method, path) for method, path, _ in routes})
    assert not gone, f"ACCESS names routes the gateway does not have: {gone}"

    wrong = []
    with serve_in_thread(app) as gateway, httpx.Client(base_url=gateway, timeout=10) as http:
        tokens = Tokens(http)
        for method, path, url in routes:
            body = {"json": {}} if method in ("POST", "PUT", "PATCH") else {}
            for caller in CALLERS:
                response = http.request(method, url, headers=_headers(caller, tokens), **body)
                want = expected(ACCESS[(method, path)], caller)
                got = PASSES if response.status_code not in (401, 403) else response.status_code
                if got != want:
                    wrong.append(f"{method} {url} by {caller}: {response.status_code}, wanted {want}")
    assert not wrong, "\n".join(wrong)


def test_a_method_no_route_takes_is_405_token_or_not(settings):
    """docs/users-and-roles.md: a method a route does not take answers 405, never 401, token or not."""
    app = create_app(settings)
    wrong = []
    with serve_in_thread(app) as gateway, httpx.Client(base_url=gateway, timeout=10) as http:
        taken: dict[str, set[str]] = {}
        for method, _, url in route_methods(app):
            taken.setdefault(url, set()).add(method)
        for url, methods in sorted(taken.items()):
            method = next(m for m in ("PUT", "PATCH", "DELETE") if m not in methods)
            for headers in ({}, _bearer("not-a-token-of-anyone")):
                response = http.request(method, url, headers=headers, json={})
                if response.status_code != 405:
                    wrong.append(f"{method} {url} with {headers or 'no token'}: {response.status_code}")
    assert not wrong, "\n".join(wrong)


# Bodies refused before they are validated: not JSON, not sent as JSON, compressed. The caller is checked first.
REFUSED_BODIES = {
    "not JSON": {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
    "a form type": {"content": b"a=1", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
    "gzip": {"content": b"\x1f\x8b", "headers": {"Content-Type": "application/json", "Content-Encoding": "gzip"}},
}


def test_a_body_refused_as_sent_gets_401_or_403_first(settings):
    """docs/users-and-roles.md: 401 without a valid token and 403 without the role, whatever the body; only a
    caller let through hears what is wrong with the body (400 or 415)."""
    app = create_app(settings)
    wrong = []
    with serve_in_thread(app) as gateway, httpx.Client(base_url=gateway, timeout=10) as http:
        tokens = Tokens(http)
        for method, path, url in route_methods(app):
            if method not in ("POST", "PUT", "PATCH", "DELETE") or ACCESS[(method, path)] == PUBLIC:
                continue
            for caller in CALLERS:
                want = expected(ACCESS[(method, path)], caller)
                for name, body in REFUSED_BODIES.items():
                    headers = {**body["headers"], **_headers(caller, tokens)}
                    response = http.request(method, url, content=body["content"], headers=headers)
                    got = PASSES if response.status_code not in (401, 403) else response.status_code
                    if got != want:
                        wrong.append(f"{method} {url} by {caller} with {name}: {response.status_code}, wanted {want}")
    assert not wrong, "\n".join(wrong)


def test_access_is_what_the_roles_guide_says():
    """Each route the guide's table of roles names, in the row of the least role it needs."""
    rows = {"no token": PUBLIC, USER: USER, ANALYST: ANALYST, ADMIN: ADMIN}
    said = {}
    for needs, routes in re.findall(r"^\| (no token|user|analyst|admin) \|(.*)\|$", ROLES_GUIDE.read_text(), re.M):
        for method, path in re.findall(r"`(GET|HEAD|POST|PUT|PATCH|DELETE) (/[^`]*)`", routes):
            said[(method, _shape(path))] = rows[needs]
    assert len(said) >= 15, "the guide's table of roles was not found"
    table = {(method, _shape(path)): access for (method, path), access in ACCESS.items()}
    differ = sorted(f"{route}: guide {want}, ACCESS {table.get(route)}" for route, want in said.items()
                    if table.get(route) != want)
    assert not differ, "\n".join(differ)


def _shape(path: str) -> str:
    """The path with each parameter, {doc_id:path} or the guide's DOC_ID, as {}."""
    return "/".join("{}" if re.fullmatch(r"\{\w+(:\w+)?\}|[A-Z][A-Z_]*", part) else part for part in path.split("/"))


def test_the_table_reads_the_roles_as_the_docs_do():
    """An admin may do all an analyst may, an analyst all a user may; the dashboard page is for analysts."""
    assert [expected(ADMIN, c) for c in CALLERS] == [401, 401, 403, 403, PASSES]
    assert [expected(ANALYST, c) for c in CALLERS] == [401, 401, 403, PASSES, PASSES]
    assert [expected(USER, c) for c in CALLERS] == [401, 401, PASSES, PASSES, PASSES]
    assert [expected(ANALYST_PAGE, c) for c in CALLERS] == [PASSES, 401, 403, PASSES, PASSES]
    assert {expected(PUBLIC, c) for c in CALLERS} == {PASSES}


def test_a_caller_let_through_hears_what_is_wrong_with_the_body(settings):
    """The refusals of the body keep their status and shape once the caller is known, /v1 in OpenAI's."""
    app = create_app(settings)
    with serve_in_thread(app) as gateway, httpx.Client(base_url=gateway, timeout=10) as http:
        token = Tokens(http)["ann"]
        for url in ("/api/feedback", "/v1/chat/completions"):
            got = {}
            for name, body in REFUSED_BODIES.items():
                response = http.post(url, content=body["content"], headers={**body["headers"], **_bearer(token)})
                error = response.json()["error"]
                got[name] = (response.status_code, error["code"] if isinstance(error, dict) else error)
            assert got == {"not JSON": (400, "malformed_json"), "a form type": (415, "unsupported_media_type"),
                           "gzip": (415, "unsupported_media_type")}, url
