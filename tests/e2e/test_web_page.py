"""The web chat page in a real browser (Debian's chromium driven by Playwright) against the whole
system started with `cairn up`: log in, ask, open a citation, follow up, rate, log out."""
from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from playwright.sync_api import Browser, Page, expect

from services.gateway.web_page import router as web_page_router
from tests.e2e.conftest import PASSWORD
from tests.support import serve_in_thread, wait_until

pytestmark = pytest.mark.e2e

ANSWER_TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("web-page-screenshots")
    print(f"screenshots in {folder}")
    return folder


def open_page(browser: Browser, url: str, width: int) -> tuple[Page, list[str]]:
    """A fresh page (its own sessionStorage) that records script errors and CSP violations."""
    page = browser.new_context(viewport={"width": width, "height": 900}).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(url)
    return page, problems


def log_in(page: Page) -> None:
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    page.get_by_label("User name").fill("demo")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_label("Your question")).to_be_focused()


def ask(page: Page, question: str) -> dict:
    """Type the question, send it with Enter, wait for the finished answer; returns the request body."""
    box = page.get_by_label("Your question")
    box.fill(question)
    with page.expect_request("**/api/chat/stream") as sent:
        box.press("Enter")
    turn = page.locator(".turn").last
    expect(turn).to_have_class(re.compile(r"\bdone\b"), timeout=ANSWER_TIMEOUT_MS)
    return sent.value.post_data_json


def fits(page: Page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width, "the page scrolls sideways"


@pytest.mark.parametrize("width", [1280, 375])
def test_log_in_ask_open_a_citation_follow_up_rate_and_log_out(cairn, browser, screenshots, width):
    page, problems = open_page(browser, cairn.gateway + "/", width)
    page.screenshot(path=screenshots / f"{width}-login.png", full_page=True)
    log_in(page)
    page.reload()  # the token is kept for the tab
    expect(page.get_by_label("Your question")).to_be_visible()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()

    first_body = ask(page, "How do I add a user?")
    assert "conversation_id" not in first_body
    first = page.locator(".turn").nth(0)
    expect(first.locator(".answer-text")).to_contain_text("cairn user add")

    cite = first.get_by_role("button", name=re.compile(r"^Citation 1\b")).first
    cite.focus()
    page.keyboard.press("Enter")
    expect(cite).to_have_attribute("aria-expanded", "true")
    panel = first.get_by_role("region", name="Cited passage")
    expect(panel).to_be_visible()
    expect(panel).to_contain_text("Users and roles")
    expect(panel).to_contain_text("cairn user add")
    expect(panel).to_contain_text(re.compile(r"Supported|Partly supported|Not supported"))

    badge = first.locator(".badge")
    expect(badge).to_have_text(re.compile(r"^(High|Medium|Low) confidence"))
    assert badge.get_attribute("title"), "the confidence reason is the badge's tooltip"
    expect(first.get_by_role("region", name="Sources")).to_contain_text("Users and roles")
    fits(page, width)
    page.screenshot(path=screenshots / f"{width}-answer.png", full_page=True)

    follow_up_body = ask(page, "And how do I list them?")
    second = page.locator(".turn").nth(1)
    expect(second.locator(".answer-text")).to_contain_text("cairn user list")
    assert follow_up_body["conversation_id"], follow_up_body
    expect(second.locator(".reformulated")).to_contain_text("How do I list a user?")

    with page.expect_response("**/api/feedback") as rated:
        second.get_by_role("button", name="Good answer").click()
    feedback = rated.value
    assert feedback.request.post_data_json["rating"] == 1
    assert feedback.request.post_data_json["request_id"]
    expected = "Thanks for your feedback." if feedback.ok else "Feedback could not be sent."
    expect(second.locator(".feedback-status")).to_have_text(expected)
    fits(page, width)
    page.screenshot(path=screenshots / f"{width}-follow-up.png", full_page=True)

    page.get_by_role("button", name="New conversation").click()
    expect(page.locator(".turn")).to_have_count(0)
    expect(page.get_by_label("Your question")).to_be_focused()
    assert "conversation_id" not in ask(page, "hello")

    token = page.evaluate("sessionStorage.getItem('cairn.token')")
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    expect(page.get_by_label("User name")).to_be_focused()
    assert page.evaluate("sessionStorage.getItem('cairn.token')") is None
    expect(page.locator(".turn")).to_have_count(0)

    def revoked() -> bool:
        response = httpx.get(f"{cairn.gateway}/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        return response.status_code == 401

    wait_until(revoked, timeout=10, what="the log-out call to revoke the token")
    assert problems == [], problems


def test_a_bad_password_and_an_expired_session_bring_back_the_login_form(cairn, browser):
    page, problems = open_page(browser, cairn.gateway + "/", 1280)
    page.get_by_label("User name").fill("demo")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_label("Password").press("Enter")
    expect(page.locator("#login-message")).to_have_text("Wrong user name or password.")

    page.evaluate("sessionStorage.setItem('cairn.token', 'revoked-or-expired')")
    page.reload()
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    expect(page.locator("#login-message")).to_contain_text("session has ended")
    assert problems == [], problems


# One byte at a time: split inside "\r\n", inside field names, inside a multi-byte character.
PARSE_IN_BROWSER = """async (stream) => {
  const { readEvents } = await import("/web/api.js");
  const bytes = new TextEncoder().encode(stream);
  const body = new ReadableStream({
    start(controller) {
      bytes.forEach((b) => controller.enqueue(new Uint8Array([b])));
      controller.close();
    },
  });
  const events = [];
  for await (const event of readEvents(body)) events.push(event);
  return events;
}"""


def test_the_page_reads_server_sent_events_split_anywhere(browser):
    app = FastAPI()
    app.include_router(web_page_router)
    with serve_in_thread(app) as url:
        page = browser.new_page()
        page.goto(url + "/")
        read = lambda stream: page.evaluate(PARSE_IN_BROWSER, stream)  # noqa: E731
        assert read(
            ": a comment\r\nevent: sources\r\ndata: {\"sources\": []}\r\n\r\n"
            "event: token\ndata: {\"text\": \"caf\u00e9 \"}\n\n"
            "data: line one\ndata: line two\n\n"
            "event: done\rdata: {}\r\r"
        ) == [
            {"event": "sources", "data": '{"sources": []}'},
            {"event": "token", "data": '{"text": "caf\u00e9 "}'},
            {"event": "message", "data": "line one\nline two"},
            {"event": "done", "data": "{}"},
        ]
        # An event the stream never finished is dropped: the page then says the answer was cut off.
        assert read("event: token\ndata: {}\n\nevent: done\ndata: {\"answer\"") == [{"event": "token", "data": "{}"}]
        page.close()


RENDER_IN_BROWSER = """async (text) => {
  const { renderAnswerText } = await import("/web/answer-text.js");
  const cite = (n) => (n === 1 ? Object.assign(document.createElement("button"), { textContent: String(n) }) : null);
  const container = document.createElement("div");
  renderAnswerText(container, text, cite);
  return container.innerHTML;
}"""


@pytest.mark.parametrize(
    ("text", "html"),
    [
        # Triple backticks within a line are a code span, not a fence that swallows the line.
        ("```cairn up``` starts every service [1].",
         '<p><code>cairn up</code> starts every service <span class="cites"><button>1</button></span>.</p>'),
        ("``` cairn ingest docs/ ``` `cairn ingest` shows a bar [2]",
         "<p><code>cairn ingest docs/</code> <code>cairn ingest</code> shows a bar [2]</p>"),
        # Only a heading's own line is the heading: the list under it is not bold.
        ("### Starting Cairn\n1. Run `cairn up` [1].\n2. Open the URL.",
         '<p class="heading">Starting Cairn</p><p>1. Run <code>cairn up</code> '
         '<span class="cites"><button>1</button></span>.\n2. Open the URL.</p>'),
        ("Intro\n```sh\nmake up\n```\nAfter **that [1]**",
         '<p>Intro</p><pre><code>make up</code></pre><p>After <strong>that <span class="cites"><button>1</button>'
         "</span></strong></p>"),
        ("Run:\n```py\nprint(1)", "<p>Run:</p><pre><code>print(1)</code></pre>"),  # still streaming: code so far
        ("<img src=x onerror=alert(1)> `[1]`", "<p>&lt;img src=x onerror=alert(1)&gt; <code>[1]</code></p>"),
    ],
)
def test_answer_text_renders_code_headings_and_citations_as_written(browser, text, html):
    app = FastAPI()
    app.include_router(web_page_router)
    with serve_in_thread(app) as url:
        page = browser.new_page()
        page.goto(url + "/")
        assert page.evaluate(RENDER_IN_BROWSER, text) == html
        page.close()
