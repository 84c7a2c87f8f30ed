"""The web chat page as the gateway serves it: same-origin assets only, with the right content types,
and nothing a Content-Security-Policy of 'self' scripts and styles would block."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from services.gateway.main import create_app
from services.gateway.settings import Settings
from services.gateway.web_page import WEB_DIR

pytestmark = pytest.mark.unit

JS = "text/javascript"
TYPES = {".js": JS, ".css": "text/css", ".svg": "image/svg+xml"}


class PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.assets: list[str] = []  # what the page loads: not its links to other pages (<a href>)
        self.scripts: list[dict[str, str | None]] = []
        self.inline_script = False
        self.inline_code: list[str] = []
        self.style_elements = 0
        self.attributes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.attributes += list(attributes)
        self.urls += [value for name, value in attrs if name in ("src", "href", "action") and value]
        self.assets += [value for name, value in attrs if value and (name == "src" or (tag == "link" and name == "href"))]
        if tag == "script":
            self.scripts.append(attributes)
            self.inline_script = True
        self.style_elements += tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self.inline_script = self.inline_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self.inline_script and data.strip():
            self.inline_code.append(data)


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(Settings()))  # no lifespan: the page needs neither Redis nor upstreams


@pytest.fixture(scope="module")
def page(client) -> PageParser:
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    parser = PageParser()
    parser.feed(response.text)
    return parser


def test_the_page_loads_every_asset_from_its_own_origin(page):
    assert page.urls, "the page references its stylesheet, script and icon"
    for url in page.urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"{url} is not same-origin"
    assert not re.search(r"https?://", (WEB_DIR / "index.html").read_text())


def test_every_referenced_asset_is_served_with_its_content_type(client, page):
    local = [url for url in page.assets if url.startswith("/")]
    assert {"/web/app.js", "/web/style.css"} <= set(local)
    for url in local:
        response = client.get(url)
        assert response.status_code == 200, url
        expected = TYPES[url[url.rfind("."):]]
        assert response.headers["content-type"].split(";")[0] == expected, url
        assert response.headers["cache-control"] == "no-cache"


def test_every_module_app_js_imports_is_local_and_served_as_javascript(client):
    seen, queue = set(), ["app.js"]
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        response = client.get(f"/web/{name}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(JS), name
        for spec in re.findall(r"""^import\s[^;]*?from\s+["']([^"']+)["']""", response.text, flags=re.M):
            assert spec.startswith("./") and "/" not in spec[2:], f"{name} imports {spec}"
            queue.append(spec[2:])
    assert {"app.js", "api.js", "turn.js", "answer-text.js"} <= seen


def test_nothing_a_self_only_content_security_policy_would_block(page):
    assert page.scripts and all(s.get("src") and s.get("type") == "module" for s in page.scripts)
    assert page.inline_code == [] and page.style_elements == 0
    assert "style" not in page.attributes
    assert not [a for a in page.attributes if a.startswith("on")], "inline event handlers"
    for script in WEB_DIR.glob("*.js"):
        code = script.read_text()
        # A style attribute is refused by style-src 'self'; a property of an element's style (CSSOM), such as
        # the dashboard's chart heights, is not.
        for unsafe in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "cssText"):
            assert unsafe not in code, f"{script.name} uses {unsafe}"
        assert not re.search(r"""setAttribute\(\s*["']style""", code), f"{script.name} writes a style attribute"
        assert not re.search(r"https?://", code), f"{script.name} names another origin"
    assert not re.search(r"https?://|@import", (WEB_DIR / "style.css").read_text())


def test_a_head_request_gets_the_page_s_headers_without_its_body(client):
    page, head = client.get("/"), client.head("/")
    assert head.status_code == 200 and head.content == b""
    for name in ("content-type", "content-security-policy", "content-length", "cache-control"):
        assert head.headers[name] == page.headers[name], name


@pytest.mark.parametrize("path", ["/web/missing.js", "/web/..%2Fweb_page.py", "/web/index.html", "/web/"])
def test_only_the_page_s_own_files_are_served(client, path):
    response = client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")


def test_the_page_routes_stay_out_of_the_api_schema(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and not [p for p in paths if p.startswith("/web")]
