"""The web chat page in a real browser (Debian's chromium driven by Playwright) against the whole
system started with `cairn up`: log in, ask, open a citation, follow up, rate, log out."""
from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from playwright.sync_api import Browser, Locator, Page, expect

from services.gateway.web_page import router as web_page_router
from tests.e2e.conftest import DRAWN_TEXT, PASSWORD
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


def log_in(page: Page, username: str = "demo") -> None:
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password", exact=True).fill(PASSWORD)
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

    conversation_id = json.loads(page.evaluate("sessionStorage.getItem('cairn.conversation')"))["conversationId"]
    page.reload()  # the conversation is kept for the tab too
    first = page.locator(".turn").nth(0)
    expect(first.locator(".question-text")).to_have_text("How do I add a user?")
    expect(first.locator(".answer-text")).to_contain_text("cairn user add")
    first.get_by_role("button", name=re.compile(r"^Citation 1\b")).first.click()
    expect(first.get_by_role("region", name="Cited passage")).to_contain_text("Users and roles")

    follow_up_body = ask(page, "And how do I list them?")
    second = page.locator(".turn").nth(1)
    expect(second.locator(".answer-text")).to_contain_text("cairn user list")
    assert follow_up_body["conversation_id"] == conversation_id, follow_up_body
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
    assert page.evaluate("sessionStorage.getItem('cairn.conversation')") is None

    def revoked() -> bool:
        response = httpx.get(f"{cairn.gateway}/auth/me", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        return response.status_code == 401

    wait_until(revoked, timeout=10, what="the log-out call to revoke the token")
    assert problems == [], problems


def test_a_bad_password_and_an_expired_session_bring_back_the_login_form(cairn, browser):
    page, problems = open_page(browser, cairn.gateway + "/", 1280)
    page.get_by_label("User name").fill("demo")
    page.get_by_label("Password", exact=True).fill("not-the-password")
    page.get_by_label("Password", exact=True).press("Enter")
    expect(page.locator("#login-message")).to_have_text("Wrong user name or password.")

    page.evaluate("sessionStorage.setItem('cairn.token', 'revoked-or-expired')")
    page.reload()
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    expect(page.locator("#login-message")).to_contain_text("session has ended")
    assert problems == [], problems


def test_the_dashboard_link_is_offered_to_analysts_and_admins_only(cairn, browser):
    demo = httpx.post(f"{cairn.gateway}/auth/login", json={"username": "demo", "password": PASSWORD}).json()
    reader = {"username": "reader", "password": PASSWORD, "roles": ["user"]}
    added = httpx.post(f"{cairn.gateway}/api/users", json=reader, headers={"Authorization": f"Bearer {demo['token']}"})
    assert added.status_code in (201, 409), added.text  # 409: added by an earlier run of this module's Cairn

    page, problems = open_page(browser, cairn.gateway + "/", 1280)
    log_in(page, "reader")
    expect(page.get_by_role("link", name="Dashboard")).to_be_hidden()
    page.get_by_role("button", name="Log out").click()
    log_in(page)  # demo: every role
    page.get_by_role("link", name="Dashboard").click()
    expect(page).to_have_url(re.compile(re.escape(cairn.gateway + "/dashboard") + r"(\?.*)?$"))  # it adds its range
    expect(page.get_by_test_id("whoami")).to_have_text("demo")  # the same session, no second log-in
    assert problems == [], problems


def test_a_user_changes_its_password_from_the_chat_page(cairn, browser, screenshots):
    demo = httpx.post(f"{cairn.gateway}/auth/login", json={"username": "demo", "password": PASSWORD}).json()
    admin = {"Authorization": f"Bearer {demo['token']}"}
    changer = {"username": "changer", "password": PASSWORD, "roles": ["user"]}
    if httpx.post(f"{cairn.gateway}/api/users", json=changer, headers=admin).status_code == 409:  # an earlier run
        httpx.put(f"{cairn.gateway}/api/users/changer/password", json={"password": PASSWORD}, headers=admin)
    new_password = "a fresh passphrase"

    page, problems = open_page(browser, cairn.gateway + "/", 375)
    log_in(page, "changer")
    page.get_by_role("button", name="Password").click()
    dialog = page.get_by_role("dialog", name="Change your password")
    expect(dialog.get_by_label("Current password")).to_be_focused()
    dialog.get_by_label("Current password").fill("not my password")
    dialog.get_by_label("New password", exact=True).fill(new_password)
    dialog.get_by_label("New password again").fill(new_password + "!")
    dialog.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-message")).to_have_text("The two new passwords differ.")
    dialog.get_by_label("New password again").fill(new_password)
    dialog.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-message")).to_have_text("The current password is wrong.")
    dialog.get_by_label("Current password").fill(PASSWORD)
    dialog.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-message")).to_have_text("Your password was changed.")
    fits(page, 375)
    page.screenshot(path=screenshots / "375-password.png")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()
    expect(page.get_by_label("Your question")).to_be_visible()  # this session goes on

    logins = [httpx.post(f"{cairn.gateway}/auth/login", json={"username": "changer", "password": p}).status_code
              for p in (PASSWORD, new_password)]
    assert logins == [401, 200]
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
        # Bold around a code span, and a code span that holds asterisks.
        ("Run **`cairn up`** first [1].",
         '<p>Run <strong><code>cairn up</code></strong> first <span class="cites"><button>1</button></span>.</p>'),
        ("`**not bold**` and **`a`, `b` [1]**",
         '<p><code>**not bold**</code> and <strong><code>a</code>, <code>b</code> '
         '<span class="cites"><button>1</button></span></strong></p>'),
        # A fence indented inside a list item is code, and a marker in it stays text.
        ("1. Start it:\n    ```sh\n    cairn up [1]\n      --verbose\n    ```\n2. Log in [1].",
         "<p>1. Start it:</p><pre><code>cairn up [1]\n  --verbose</code></pre>"
         '<p>2. Log in <span class="cites"><button>1</button></span>.</p>'),
        ("````md\n```\ninner\n```\n````", "<pre><code>```\ninner\n```</code></pre>"),  # a longer fence holds ```
        # A fence of tildes is one too (chat leaves markers in it as written): its [2] was a button for citation 2.
        ("~~~sh\ncairn up [2]\n```\n~~~\nDone [1].",
         '<pre><code>cairn up [2]\n```</code></pre><p>Done <span class="cites"><button>1</button></span>.</p>'),
        # What chat leaves as written is no citation: a range of values, a link.
        ("Scores lie in [0, 1] [1].", '<p>Scores lie in [0, 1] <span class="cites"><button>1</button></span>.</p>'),
        ("Read [1](https://example.com) first.", "<p>Read [1](https://example.com) first.</p>"),
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


# --- the page against a fake gateway: answers, failures and slow calls on demand -------------------
PASSAGE_1 = "Users and roles. An administrator manages users with the cairn user commands."
PASSAGE_2 = (
    "Adding a user. Run cairn user add with a user name; the command asks for the password twice. "
    + "Give the roles with --role, once for each role the user needs. " * 3
    + "The new user can log in at once, and the add is written to the audit log."
)
LONG_LINE = "cairn ingest " + " ".join(f"--tag=a-rather-long-tag-{i}" for i in range(40))


def citation(n: int, content: str, chunk: int) -> dict:
    return {
        "n": n, "doc_id": "docs/users.md", "chunk_id": f"docs/users.md#{chunk}", "title": "Users and roles",
        "section": "Adding a user", "page": None, "url": None,
        "snippet": content if len(content) <= 200 else content[:120] + "…", "content": content,
        "support": {"verdict": "supported", "score": 0.9},
    }


CITATIONS = [citation(1, PASSAGE_1, 1), citation(2, PASSAGE_2, 2)]


WRONG = "wrong password"  # the fake gateway refuses it, at log-in and as the current password


class FakeGateway:
    """The gateway's routes the chat page calls. `plans` says how the next questions are answered, in order:
    {"answer": text}, {"status": 401} (or {"status": 404, "code": code}; a "retry_after" value is sent as its
    Retry-After header), {"error": code} (an error event; a "fields" dict adds to or replaces its data),
    {"hang": text} (the stream stays open after that text until the page closes it) or {"break": text} (the
    connection breaks after that text); an answer with "then_break" set loses its connection after `done`, and
    one with "pause_after" sends that start of it, then waits for `resume` before the rest, sent a word every
    fifth of a second when "word_by_word" is set. `rating_status` answers the ratings."""

    def __init__(self) -> None:
        self.plans: list[dict] = []
        self.asked: list[dict] = []
        self.closed: list[str] = []  # questions whose stream the page closed before its end
        self.ratings: list[dict] = []
        self.rating_delay = 0.0
        self.rating_status = 204
        self.resume = threading.Event()
        self.citations = CITATIONS
        self.ids = itertools.count(1)

    def app(self) -> FastAPI:
        app = FastAPI()
        app.include_router(web_page_router)

        @app.post("/auth/login")
        async def login(request: Request) -> Response:
            body = await request.json()
            if body["password"] == WRONG:
                return JSONResponse({"error": "unauthorized", "message": "Not this time."}, status_code=401)
            username = body["username"]
            return JSONResponse({"token": f"token-{username}-{next(self.ids)}", "user": {"username": username}})

        @app.post("/auth/password")
        async def change_password(request: Request) -> Response:
            if (await request.json())["current_password"] == WRONG:
                return JSONResponse({"error": "forbidden", "message": "Not this time."}, status_code=403)
            return JSONResponse({"sessions_ended": 0})

        @app.get("/auth/me")
        async def me(request: Request) -> dict:
            token = request.headers["authorization"].removeprefix("Bearer token-")
            return {"user": {"username": token.rsplit("-", 1)[0]}}

        @app.post("/api/feedback")
        async def feedback(request: Request) -> Response:
            await asyncio.sleep(self.rating_delay)
            if self.rating_status == 401:
                return JSONResponse({"error": "unauthorized", "message": "Not this time."}, status_code=401)
            self.ratings.append(await request.json())
            return Response(status_code=self.rating_status)

        @app.post("/api/chat/stream")
        async def stream(request: Request) -> Response:
            body = await request.json()
            self.asked.append(body)
            plan = self.plans.pop(0) if self.plans else {"answer": "Run `cairn user add` [1]."}
            if "status" in plan:
                code = plan.get("code", "unauthorized")
                headers = {"Retry-After": plan["retry_after"]} if "retry_after" in plan else None
                return JSONResponse({"error": code, "message": "Not this time."}, status_code=plan["status"],
                                    headers=headers)
            return StreamingResponse(self.events(body, plan), media_type="text/event-stream")

        return app

    async def events(self, body: dict, plan: dict):
        def event(name: str, data: dict) -> str:
            return f"event: {name}\ndata: {json.dumps(data)}\n\n"

        yield event("sources", {"sources": [{**c, "support": None} for c in self.citations]})
        if "error" in plan:
            yield event("error", {"error": plan["error"], "message": "The model failed.", **plan.get("fields", {})})
            return
        if "break" in plan:
            yield event("token", {"text": plan["break"]})
            await asyncio.sleep(0.1)
            raise ConnectionAbortedError("the gateway went away mid-answer")  # uvicorn drops the connection
        if "hang" in plan:
            yield event("token", {"text": plan["hang"]})
            try:
                while True:
                    await asyncio.sleep(0.05)
            finally:
                self.closed.append(body["query"])
        start = plan.get("pause_after", "")
        if start:
            yield event("token", {"text": start})
            try:
                while not self.resume.is_set():
                    await asyncio.sleep(0.05)
            except BaseException:
                self.closed.append(body["query"])
                raise
        rest = plan["answer"].removeprefix(start)
        words = re.findall(r"\s*\S+", rest) if plan.get("word_by_word") else [rest]
        for word in words:
            yield event("token", {"text": word})
            if len(words) > 1:
                await asyncio.sleep(0.2)
        n = next(self.ids)
        yield event("done", {
            "query": body["query"], "answer": plan["answer"], "conversation_id": body.get("conversation_id", f"conv-{n}"),
            "new_conversation": plan.get("new_conversation", "conversation_id" not in body),
            "citations": self.citations, "sources": [{**self.citations[0], "score": 0.8}], "related_docs": [],
            "confidence": {"level": "High", "score": 0.9, "reason": "2 relevant sources"}, "grounding": None,
            "metadata": {"request_id": f"req-{n}", "kind": plan.get("kind", "answer"), "model": "fake", "reformulated_query": body["query"],
                         "timings_ms": {"total": 12}},
        })
        if plan.get("then_break"):
            await asyncio.sleep(0.1)
            raise ConnectionAbortedError("the gateway went away after the answer")


@pytest.fixture()
def fake() -> Iterator[tuple[FakeGateway, str]]:
    gateway = FakeGateway()
    with serve_in_thread(gateway.app()) as url:
        yield gateway, url


def log_in_as(page: Page, username: str) -> None:
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password", exact=True).fill("any")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_label("Your question")).to_be_focused()


def test_a_long_code_line_or_an_opened_passage_scrolls_in_its_box_on_a_phone(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": f"Run it [1]:\n```sh\n{LONG_LINE}\n```\nThen **`{LONG_LINE}`** [2]."}]
    code = f"\n```\n{LONG_LINE}\n```"
    gateway.citations = [citation(1, PASSAGE_1 + code, 1), citation(2, PASSAGE_2 + code, 2)]
    page, problems = open_page(browser, url + "/", 375)
    log_in_as(page, "demo")
    ask(page, "How do I tag documents?")
    turn = page.locator(".turn").last
    turn.get_by_role("button", name=re.compile(r"^Citation 2\b")).click()
    turn.get_by_text("Show the whole passage").click()
    turn.get_by_text("Show passage").click()
    fits(page, 375)
    pre = turn.locator(".answer-text pre")
    assert pre.evaluate("e => e.scrollWidth > e.clientWidth"), "the code line scrolls inside its box"
    assert problems == [], problems


def test_the_citation_panel_shows_the_whole_passage_behind_each_citation(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "An administrator does it [1]. Give roles with --role [2]."}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    turn = page.locator(".turn").last
    # [2] comes from the same document as [1], so the sources list holds only [1]'s passage.
    expect(turn.get_by_role("region", name="Sources")).not_to_contain_text("audit log")
    turn.get_by_role("button", name=re.compile(r"^Citation 2\b")).click()
    panel = turn.get_by_role("region", name="Cited passage")
    expect(panel.locator(".snippet")).to_contain_text("Adding a user.")
    rest = panel.get_by_text("written to the audit log")
    expect(rest).to_be_hidden()
    panel.get_by_text("Show the whole passage").click()
    expect(rest).to_be_visible()
    expect(panel.locator(".snippet")).to_be_hidden()
    expect(panel).to_contain_text("Supported by the passage")
    turn.get_by_role("button", name=re.compile(r"^Citation 1\b")).click()
    expect(panel.locator(".snippet")).to_have_text(PASSAGE_1)  # short: whole at once
    assert problems == [], problems


# A title that reverses what follows it (U+202E), closing first any isolate it is put in (U+2069).
REVERSING_TITLE = "Pump\u202e man\u2069\u202eual"


def test_a_bidi_override_in_a_document_title_reverses_neither_its_section_nor_its_page(browser, fake):
    gateway, url = fake
    gateway.citations = [{**CITATIONS[0], "title": REVERSING_TITLE, "section": "Intro", "page": 3}]
    gateway.plans = [{"answer": "Prime the pump [1]."}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I prime the pump?")
    turn = page.locator(".turn").last
    turn.get_by_role("button", name=re.compile(r"^Citation 1\b")).click()
    for title in (turn.locator(".panel-title"), turn.locator(".source-title")):
        expect(title).to_have_text(f"{REVERSING_TITLE} › Intro (page 3)")
        assert title.evaluate(DRAWN_TEXT).endswith(" › Intro (page 3)")
    assert problems == [], problems


def test_stop_ends_the_streamed_answer_and_keeps_the_conversation(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."}, {"hang": "Roles are given with"}, {"answer": "Yes [1]."}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    box = page.get_by_label("Your question")
    box.fill("And roles?")
    page.get_by_role("button", name="Ask").click()
    stop = page.get_by_role("button", name="Stop")
    turn = page.locator(".turn").last
    expect(turn.locator(".answer-text")).to_have_text("Roles are given with")
    box.fill("typed meanwhile")
    box.press("Enter")  # Enter while an answer streams neither sends nor stops
    expect(stop).to_be_visible()
    stop.click()
    expect(turn).to_have_class(re.compile(r"\bstopped\b"))
    expect(turn.locator(".answer-status")).to_contain_text("Stopped")
    expect(turn.locator(".answer-text")).to_have_text("Roles are given with")
    expect(page.get_by_role("button", name="Ask")).to_be_visible()
    expect(box).to_be_focused()
    expect(box).to_have_value("typed meanwhile")
    wait_until(lambda: gateway.closed == ["And roles?"], timeout=10, what="the page to close the stream")
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".turn").first).to_have_class(re.compile(r"\bdone\b"))
    first_conversation = gateway.asked[0].get("conversation_id")
    assert first_conversation is None and gateway.asked[1]["conversation_id"]
    assert ask(page, "Can I add many?")["conversation_id"] == gateway.asked[1]["conversation_id"]
    assert len(gateway.asked) == 3
    assert problems == [], problems


def test_a_citation_opened_with_the_keyboard_while_the_answer_is_written_keeps_its_focus_and_passage(browser, fake):
    gateway, url = fake
    start = "Run `cairn user add` [2]."
    gateway.plans = [{"answer": start + " Give roles with --role, once for each role [2].", "pause_after": start,
                      "word_by_word": True}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    page.get_by_label("Your question").fill("How do I add a user?")
    page.keyboard.press("Enter")
    turn = page.locator(".turn").last
    cite = turn.get_by_role("button", name=re.compile(r"^Citation 2\b")).first
    expect(cite).to_be_visible()
    page.keyboard.press("Shift+Tab")  # from the question box back to the citation just written
    expect(cite).to_be_focused()
    page.keyboard.press("Enter")
    panel = turn.get_by_role("region", name="Cited passage")
    expect(panel).to_contain_text("Adding a user.")

    gateway.resume.set()
    expect(turn.locator(".answer-text")).to_contain_text("Give roles")  # more words came in meanwhile
    expect(turn).not_to_have_class(re.compile(r"\bdone\b"))
    expect(cite).to_be_focused()
    expect(turn).to_have_class(re.compile(r"\bdone\b"))
    expect(cite).to_be_focused()
    expect(cite).to_have_attribute("aria-expanded", "true")
    expect(panel).to_contain_text("Adding a user.")
    expect(panel).to_contain_text("Supported by the passage")  # the checked citation, as the answer ended
    page.keyboard.press("Enter")
    expect(panel).to_be_hidden()
    assert problems == [], problems


def test_clicking_ask_gives_the_focus_back_to_the_question_box(browser, fake):
    _, url = fake
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    page.get_by_label("Your question").fill("How do I add a user?")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".turn").last).to_have_class(re.compile(r"\bdone\b"))
    expect(page.get_by_label("Your question")).to_be_focused()
    assert problems == [], problems


def test_a_rating_can_be_changed_but_not_sent_twice_at_once(browser, fake):
    gateway, url = fake
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    turn = page.locator(".turn").last
    good, bad = turn.get_by_role("button", name="Good answer"), turn.get_by_role("button", name="Bad answer")
    good.click()
    expect(turn.locator(".feedback-status")).to_have_text("Thanks for your feedback.")
    gateway.rating_delay = 0.5
    bad.click()
    expect(turn.locator(".feedback-status")).to_have_text("Sending…")
    good.click()  # while the first is on its way: not sent
    bad.click()
    expect(turn.locator(".feedback-status")).to_have_text("Thanks for your feedback.")
    expect(bad).to_have_attribute("aria-pressed", "true")
    expect(good).to_have_attribute("aria-pressed", "false")
    expect(good).to_be_enabled()
    page.wait_for_timeout(700)
    assert [r["rating"] for r in gateway.ratings] == [1, -1], gateway.ratings
    assert problems == [], problems


def ask_and_fail(page: Page, question: str) -> tuple[Locator, Locator]:
    """Send the question with Enter and wait for its turn to fail; returns the question box and the turn."""
    box = page.get_by_label("Your question")
    box.fill(question)
    box.press("Enter")
    turn = page.locator(".turn").last
    expect(turn).to_have_class(re.compile(r"\bfailed\b"))
    return box, turn


def test_an_error_event_puts_the_question_back(browser, fake):
    gateway, url = fake
    gateway.plans = [{"error": "llm_unavailable"}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    box, turn = ask_and_fail(page, "How do I add a user?")
    expect(turn.locator(".answer-status")).to_contain_text("language model is not answering")
    expect(box).to_have_value("How do I add a user?")
    assert problems == [], problems


@pytest.mark.parametrize(
    ("code", "fields", "expected"),
    [("llm_unavailable", {"status": 503, "retry_after": "20"},
      r"^Cairn is partly unavailable: The model failed\. Try again in 20 seconds\.$"),
     ("llm_content_filtered", {"status": 422, "message": "the model's content filter refused it: ask it in other words"},
      r"^the model's content filter refused it: ask it in other words$"),
     ("llm_unavailable", {"status": 502}, r"^The language model is not answering right now\."),
     ("chat_timeout", {}, r"^Cairn took too long to answer\.")],  # the gateway's own events carry no status
    ids=["503-retry-after", "422-content-filtered", "502", "no-status"],
)
def test_an_error_event_is_told_by_its_status_and_retry_after(browser, fake, code, fields, expected):
    gateway, url = fake
    gateway.plans = [{"error": code, "fields": fields}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    box, turn = ask_and_fail(page, "How do I add a user?")
    expect(turn.locator(".answer-status")).to_have_text(re.compile(expected))
    expect(box).to_have_value("How do I add a user?")
    assert problems == [], problems


@pytest.mark.parametrize(
    ("status", "code", "retry_after", "expected"),
    [(503, "retrieval_unavailable", "7",
      r"^Cairn is partly unavailable: Not this time\. Try again in 7 seconds\.$"),
     (503, "retrieval_unavailable", "1", r"Try again in 1 second\.$"),
     (503, "retrieval_unavailable", "in-http-date", r"Try again in (2\d|30) seconds\.$"),  # less the time to log in
     (503, "retrieval_unavailable", None, r"Try again in a moment\.$"),
     (429, "rate_limited", "12", r"^Too many requests\. Try again in 12 seconds\.$")],
    ids=["503-seconds", "503-one-second", "503-http-date", "503-without-header", "429-seconds"],
)
def test_a_refusal_with_retry_after_says_how_long_to_wait(browser, fake, status, code, retry_after, expected):
    gateway, url = fake
    plan = {"status": status, "code": code}
    if retry_after == "in-http-date":
        plan["retry_after"] = email.utils.formatdate(time.time() + 30, usegmt=True)
    elif retry_after is not None:
        plan["retry_after"] = retry_after
    gateway.plans = [plan]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    box, turn = ask_and_fail(page, "How do I add a user?")
    expect(turn.locator(".answer-status")).to_have_text(re.compile(expected))
    expect(box).to_have_value("How do I add a user?")
    assert problems == [], problems


def test_a_connection_broken_mid_answer_keeps_the_text_so_far_and_puts_the_question_back(browser, fake):
    gateway, url = fake
    gateway.plans = [{"break": "To add a user, run"}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    box, turn = ask_and_fail(page, "How do I add a user?")
    expect(turn.locator(".answer-status")).to_have_text("The answer was cut off. Try again.")
    expect(turn.locator(".answer-text")).to_have_text("To add a user, run")
    expect(box).to_have_value("How do I add a user?")
    assert problems == [], problems


def test_a_connection_broken_after_the_answer_ended_leaves_the_answer_whole(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1].", "then_break": True}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    expect(page.get_by_role("button", name="Ask")).to_be_visible()
    turn = page.locator(".turn").last
    expect(turn).not_to_have_class(re.compile(r"\bfailed\b"))
    expect(turn.locator(".answer-status")).to_have_text("")
    expect(page.get_by_label("Your question")).to_have_value("")
    assert problems == [], problems


def test_new_conversation_keeps_the_question_in_the_box(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."}, {"error": "llm_unavailable"}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    box, _ = ask_and_fail(page, "And roles?")  # put back in the box
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator(".turn")).to_have_count(0)
    expect(box).to_have_value("And roles?")
    expect(box).to_be_focused()
    assert "conversation_id" not in ask(page, "And roles?")
    assert problems == [], problems


def test_a_long_user_name_wraps_in_the_top_bar_on_a_phone(browser, fake):
    _, url = fake
    page, problems = open_page(browser, url + "/", 375)
    log_in_as(page, "alexandra.konstantinopoulou@research.example.org")  # a valid user name: 48 characters
    fits(page, 375)
    assert problems == [], problems


def test_an_ended_session_keeps_the_question_and_the_conversation_for_the_same_user(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."}, {"status": 401}, {"answer": "Use --role [2]."},
                     {"status": 401}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    box = page.get_by_label("Your question")
    box.fill("And roles?")
    box.press("Enter")
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    expect(page.locator("#login-message")).to_contain_text("session has ended")
    expect(page.get_by_label("Password", exact=True)).to_be_focused()  # the user name is still filled in

    log_in_as(page, "demo")
    expect(box).to_have_value("And roles?")
    expect(page.locator(".turn").first.locator(".answer-text")).to_contain_text("cairn user add")
    body = ask(page, "And roles?")
    assert body["conversation_id"] == gateway.asked[1]["conversation_id"] != None, gateway.asked  # noqa: E711

    box.fill("One more?")
    box.press("Enter")
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    log_in_as(page, "someone-else")  # another user gets none of it
    expect(page.locator(".turn")).to_have_count(0)
    expect(box).to_have_value("")
    assert "conversation_id" not in ask(page, "hello")
    assert problems == [], problems


def test_a_rating_refused_for_an_ended_session_lets_the_answer_being_written_finish(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."},
                     {"answer": "Roles are given with --role [2].", "pause_after": "Roles are given with"},
                     {"answer": "Yes [1]."},
                     {"answer": "Use a file [1].", "pause_after": "Use a"}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    first, second = page.locator(".turn").nth(0), page.locator(".turn").nth(1)
    box = page.get_by_label("Your question")
    box.fill("And roles?")
    box.press("Enter")
    expect(second.locator(".answer-text")).to_have_text("Roles are given with")

    gateway.rating_status = 401
    first.get_by_role("button", name="Good answer").click()
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    expect(page.locator("#login-message")).to_contain_text("session has ended")
    page.wait_for_timeout(300)
    assert gateway.closed == [], "the answer asked with a valid session goes on"
    gateway.resume.set()
    expect(second).to_have_class(re.compile(r"\bdone\b"))

    log_in_as(page, "demo")
    expect(second).not_to_have_class(re.compile(r"\bstopped\b"))
    expect(second.locator(".answer-text")).to_have_text("Roles are given with --role 2.")
    expect(first.locator(".feedback-status")).to_have_text("Feedback could not be sent.")
    assert ask(page, "Can I add many?")["conversation_id"] == gateway.asked[1]["conversation_id"]

    # Another user logging in instead gets none of it: the answer being written is stopped with the rest.
    gateway.resume.clear()
    box.fill("From a file?")
    box.press("Enter")
    expect(page.locator(".turn").last.locator(".answer-text")).to_have_text("Use a")
    first.get_by_role("button", name="Good answer").click()
    expect(page.get_by_role("heading", name="Log in to Cairn")).to_be_visible()
    log_in_as(page, "someone-else")
    expect(page.locator(".turn")).to_have_count(0)
    expect(page.get_by_role("button", name="Ask")).to_be_visible()
    wait_until(lambda: gateway.closed == ["From a file?"], timeout=10, what="the page to close the stream")
    assert "conversation_id" not in ask(page, "hello")
    assert problems == [], problems


HIDDEN_BEHIND_THE_QUESTION_BAR = """() => {
  const focused = document.activeElement, bar = document.getElementById("ask-form");
  if (bar.contains(focused) || !focused.closest(".turn")) return null;
  const a = focused.getBoundingClientRect(), b = bar.getBoundingClientRect();
  return a.bottom > b.top && a.top < b.bottom ? focused.getAttribute("aria-label") || focused.textContent : null;
}"""


def test_tabbing_through_the_answers_never_hides_the_focus_behind_the_question_bar(browser, fake):
    """The question bar sticks to the bottom of the window: a button the keyboard focuses is scrolled above it."""
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]. " * 6 + "Give roles with --role [2]."}] * 3
    page, problems = open_page(browser, url + "/", 1280)
    page.set_viewport_size({"width": 1280, "height": 600})
    log_in_as(page, "demo")
    for question in ("How do I add a user?", "And roles?", "And passwords?"):
        ask(page, question)
    page.evaluate("window.scrollTo(0, 0)")
    page.get_by_role("button", name="Log out").focus()
    hidden = []
    for _ in range(20):
        page.keyboard.press("Tab")
        if (name := page.evaluate(HIDDEN_BEHIND_THE_QUESTION_BAR)) is not None:
            hidden.append(name)
    assert hidden == [], hidden
    assert problems == [], problems


def test_shift_enter_starts_a_new_line_and_enter_sends_the_question_with_it(browser, fake):
    gateway, url = fake
    page, problems = open_page(browser, url + "/", 375)
    log_in_as(page, "demo")
    box = page.get_by_label("Your question")
    box.type("Why does ingest fail?")
    box.press("Shift+Enter")
    box.type("Error: no such file")
    assert gateway.asked == [] and page.locator(".turn").count() == 0, "Shift+Enter sent the question"
    expect(box).to_have_value("Why does ingest fail?\nError: no such file")
    assert box.evaluate("e => e.scrollHeight <= e.clientHeight"), "both lines are in view"
    body = ask(page, box.input_value())  # Enter sends
    assert body["query"] == "Why does ingest fail?\nError: no such file"
    expect(page.locator(".turn .question-text")).to_have_text("Why does ingest fail?\nError: no such file")
    assert page.locator(".turn .question").evaluate("e => getComputedStyle(e).whiteSpace") == "pre-line"
    expect(box).to_have_value("")
    expect(box).to_be_focused()
    assert problems == [], problems


def test_the_skip_link_is_offered_only_where_the_question_box_is(browser, fake):
    _, url = fake
    page, problems = open_page(browser, url + "/", 1280)
    expect(page.get_by_label("User name")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.textContent") != "Skip to the question", "a link to a hidden box"
    log_in_as(page, "demo")
    page.get_by_role("button", name="New conversation").focus()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_role("link", name="Skip to the question")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_label("Your question")).to_be_focused()
    assert problems == [], problems


# --- a reload keeps the conversation of the tab ------------------------------------------------------
KEPT = "sessionStorage.getItem('cairn.conversation')"


def test_a_reload_shows_the_conversation_again_and_goes_on_with_it(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1] <b>as admin</b> [2]."}, {"answer": "Use --role [2]."}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    page.locator(".turn").last.get_by_role("button", name="Good answer").click()
    expect(page.locator(".feedback-status")).to_have_text("Thanks for your feedback.")

    page.reload()
    turn = page.locator(".turn")
    expect(turn).to_have_count(1)
    expect(turn).to_have_class(re.compile(r"\bdone\b"))
    expect(page.locator("#intro")).to_be_hidden()
    expect(turn.locator(".question-text")).to_have_text("How do I add a user?")
    expect(turn.locator(".answer-text")).to_have_text("Run cairn user add 1 <b>as admin</b> 2.")  # text, not HTML
    turn.get_by_role("button", name=re.compile(r"^Citation 2\b")).click()
    expect(turn.get_by_role("region", name="Cited passage").locator(".snippet")).to_contain_text("Adding a user.")
    expect(turn.get_by_role("region", name="Sources")).to_contain_text("Users and roles")
    expect(turn.locator(".badge")).to_have_text(re.compile(r"^High confidence"))
    good, bad = turn.get_by_role("button", name="Good answer"), turn.get_by_role("button", name="Bad answer")
    expect(good).to_have_attribute("aria-pressed", "true")
    bad.click()  # the restored answer can still be rated: by its request id
    expect(turn.locator(".feedback-status")).to_have_text("Thanks for your feedback.")
    assert [r["rating"] for r in gateway.ratings] == [1, -1]
    assert gateway.ratings[0]["request_id"] == gateway.ratings[1]["request_id"]

    body = ask(page, "And roles?")
    first_answer_id = json.loads(page.evaluate(KEPT))["conversationId"]
    assert body["conversation_id"] == first_answer_id and first_answer_id.startswith("conv-"), body
    page.reload()
    expect(page.locator(".turn")).to_have_count(2)
    expect(page.locator(".turn").last.locator(".answer-text")).to_have_text("Use --role 2.")

    page.get_by_role("button", name="Log out").click()
    assert page.evaluate(KEPT) is None
    log_in_as(page, "demo")
    page.reload()
    expect(page.get_by_label("Your question")).to_be_focused()
    expect(page.locator(".turn")).to_have_count(0)
    assert problems == [], problems


def test_a_reload_while_an_answer_is_written_keeps_the_question_as_interrupted(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."}, {"hang": "Roles are given"}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    box = page.get_by_label("Your question")
    box.fill("And roles?")
    box.press("Enter")
    expect(page.locator(".turn").last.locator(".answer-text")).to_have_text("Roles are given")

    page.reload()
    expect(page.locator(".turn")).to_have_count(2)
    cut = page.locator(".turn").last
    expect(cut).to_have_class(re.compile(r"\binterrupted\b"))
    expect(cut.locator(".answer-status")).to_have_text(
        "Interrupted when the page was reloaded. Ask again for an answer.")
    expect(cut.locator(".answer-text")).to_have_text("")
    expect(box).to_have_value("And roles?")  # ready to send again
    body = ask(page, "And roles?")
    assert body["conversation_id"] == gateway.asked[1]["conversation_id"] != None  # noqa: E711

    page.reload()  # the question goes back in the box only right after the reload that cut it
    expect(page.locator(".turn")).to_have_count(3)
    expect(page.locator(".turn").nth(1)).to_have_class(re.compile(r"\binterrupted\b"))
    expect(box).to_have_value("")
    assert problems == [], problems


def test_a_conversation_cairn_refuses_after_a_reload_starts_again(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."}, {"status": 404, "code": "conversation_not_found"}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    page.reload()
    box, turn = ask_and_fail(page, "And roles?")
    expect(turn.locator(".answer-status")).to_have_text("This conversation has expired. Ask again to start a new one.")
    expect(box).to_have_value("And roles?")
    assert "conversation_id" not in ask(page, "And roles?")
    new_id = json.loads(page.evaluate(KEPT))["conversationId"]
    assert new_id != gateway.asked[1]["conversation_id"]

    page.reload()
    expect(page.locator(".turn")).to_have_count(3)
    expect(page.locator(".turn").nth(1).locator(".answer-status")).to_contain_text("has expired")
    assert ask(page, "And passwords?")["conversation_id"] == new_id

    page.get_by_role("button", name="New conversation").click()
    page.reload()
    expect(page.get_by_label("Your question")).to_be_focused()
    expect(page.locator(".turn")).to_have_count(0)
    assert "conversation_id" not in ask(page, "hello")

    page.evaluate("sessionStorage.setItem('cairn.token', 'token-someone-else-99')")
    page.reload()  # the tab now belongs to another user: none of the last one's conversation
    expect(page.locator("#whoami")).to_have_text("someone-else")
    expect(page.locator(".turn")).to_have_count(0)
    assert page.evaluate(KEPT) is None
    assert problems == [], problems


def test_a_follow_up_in_a_conversation_cairn_no_longer_had_says_it_was_answered_on_its_own(browser, fake):
    gateway, url = fake
    gateway.plans = [{"answer": "Run `cairn user add` [1]."}, {"answer": "Roles [1].", "new_conversation": True}]
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    expect(page.locator(".turn").first.locator(".restarted")).to_be_hidden()  # a first question is new anyway
    first_id = json.loads(page.evaluate(KEPT))["conversationId"]
    assert ask(page, "And roles?")["conversation_id"] == first_id  # sent as a follow-up
    expired = page.locator(".turn").last.locator(".restarted")
    expect(expired).to_have_text("Cairn no longer had this conversation, which expires after a time without "
                                 "questions, so this question was answered without the ones above it.")
    expect(expired).to_be_visible()
    page.reload()
    expect(page.locator(".turn").last.locator(".restarted")).to_be_visible()
    expect(page.locator(".turn").first.locator(".restarted")).to_be_hidden()
    ask(page, "And passwords?")  # the conversation goes on under the same id, kept again
    expect(page.locator(".turn").last.locator(".restarted")).to_be_hidden()

    # Small talk is never kept, so the question after it is new to Cairn too: nothing was lost, nothing to say.
    page.get_by_role("button", name="New conversation").click()
    gateway.plans = [{"answer": "Hello!", "kind": "small_talk"}, {"answer": "Run it [1].", "new_conversation": True}]
    ask(page, "hello")
    assert "conversation_id" in ask(page, "How do I add a user?")
    expect(page.locator(".turn").last.locator(".restarted")).to_be_hidden()
    assert problems == [], problems

SAVE_IN_BROWSER = """async ({ turns, chars, quota }) => {
  const saved = await import("/web/saved-conversation.js");
  const setItem = Storage.prototype.setItem;
  Storage.prototype.setItem = function (key, value) {
    if (value.length > quota) throw new DOMException("full", "QuotaExceededError");
    return setItem.call(this, key, value);
  };
  try {
    const answer = { answer: "x".repeat(chars) };
    const all = Array.from({ length: turns }, (_, i) => ({ question: `q${i}`, answer }));
    saved.save({ owner: "demo", conversationId: "c1", turns: all });
    const kept = saved.load();
    const size = sessionStorage.getItem("cairn.conversation").length;
    return kept && { questions: kept.turns.map((t) => t.question), size };
  } finally {
    Storage.prototype.setItem = setItem;
  }
}"""


@pytest.mark.parametrize(
    ("turns", "chars", "quota", "kept"),
    [
        (60, 10, 10**9, 50),  # at most 50 turns
        (20, 100_000, 10**9, 9),  # about a megabyte
        (20, 10_000, 50_000, 2),  # the browser's quota: fewer, newest first
        (1, 100_000, 1_000, 0),  # not even one answer fits: only the conversation's id
    ],
)
def test_the_kept_conversation_is_bounded_and_a_full_storage_breaks_nothing(browser, turns, chars, quota, kept):
    app = FastAPI()
    app.include_router(web_page_router)
    with serve_in_thread(app) as url:
        page = browser.new_page()
        page.goto(url + "/")
        result = page.evaluate(SAVE_IN_BROWSER, {"turns": turns, "chars": chars, "quota": quota})
        page.close()
    assert result["questions"] == [f"q{i}" for i in range(turns - kept, turns)], result
    assert result["size"] <= min(1_000_000, quota) + 1000


def test_a_refused_password_marks_the_field_at_fault_and_says_why_when_it_is_focused(browser, fake):
    _, url = fake
    page, problems = open_page(browser, url + "/", 1280)
    page.get_by_label("User name").fill("demo")
    page.get_by_label("Password", exact=True).fill(WRONG)
    page.get_by_label("Password", exact=True).press("Enter")
    password = page.get_by_label("Password", exact=True)
    expect(password).to_be_focused()
    expect(password).to_have_attribute("aria-invalid", "true")
    expect(password).to_have_accessible_description("Wrong user name or password.")
    password.fill("right")
    password.press("Enter")
    expect(page.get_by_label("Your question")).to_be_focused()

    page.get_by_role("button", name="Password").click()
    dialog = page.get_by_role("dialog", name="Change your password")
    current, new, again = (dialog.get_by_label(name, exact=True)
                           for name in ("Current password", "New password", "New password again"))
    current.fill(WRONG)
    new.fill("a fresh passphrase")
    again.fill("a fresh passphrase!")
    again.press("Enter")
    expect(again).to_be_focused()
    expect(again).to_have_attribute("aria-invalid", "true")
    expect(again).to_have_accessible_description("The two new passwords differ.")
    expect(new).not_to_have_attribute("aria-invalid", "true")
    expect(new).to_have_accessible_description("8 to 1024 characters")

    again.fill("a fresh passphrase")
    again.press("Enter")
    expect(current).to_be_focused()
    expect(current).to_have_accessible_description("The current password is wrong.")
    expect(again).not_to_have_attribute("aria-invalid", "true")
    expect(again).to_have_accessible_description("")

    current.fill("right")
    current.press("Enter")
    expect(dialog.get_by_role("status")).to_have_text("Your password was changed.")
    expect(current).not_to_have_attribute("aria-invalid", "true")
    page.keyboard.press("Escape")  # the dialog closes, and the keyboard is back where it was
    expect(dialog).to_be_hidden()
    expect(page.get_by_role("button", name="Password")).to_be_focused()
    assert problems == [], problems


def test_the_page_keeps_a_main_heading_once_the_conversation_starts(browser, fake):
    """A screen reader's key for the main heading finds one with the introduction, and after it gives way to answers."""
    _, url = fake
    page, problems = open_page(browser, url + "/", 1280)
    log_in_as(page, "demo")
    expect(page.get_by_role("heading", level=1)).to_have_text(["Ask a question"])
    ask(page, "How do I add a user?")
    expect(page.get_by_role("heading", level=1)).to_have_text(["Conversation"])
    page.get_by_role("button", name="New conversation").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(["Ask a question"])
    assert problems == [], problems


CONTRAST_OF = """(field) => {
    const rgb = (css) => css.match(/[\\d.]+/g).slice(0, 3).map(Number);
    const luminance = (css) => {
        const [r, g, b] = rgb(css).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    let behind = field.parentElement;
    while (rgb(getComputedStyle(behind).backgroundColor).length < 3
           || getComputedStyle(behind).backgroundColor === "rgba(0, 0, 0, 0)") behind = behind.parentElement;
    const [a, b] = [luminance(getComputedStyle(field).borderTopColor), luminance(getComputedStyle(behind).backgroundColor)];
    return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_text_field_is_known_by_an_edge_of_3_to_1_on_what_is_behind_it(browser, fake, scheme):
    """WCAG 1.4.11: a field's boundary is what tells it apart; the page's border colour gave 1.37:1."""
    _, url = fake
    page = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme).new_page()
    page.goto(url + "/")
    for field in (page.get_by_label("User name"), page.get_by_label("Password", exact=True)):
        assert field.evaluate(CONTRAST_OF) >= 3, field
    log_in_as(page, "demo")
    assert page.get_by_label("Your question").evaluate(CONTRAST_OF) >= 3


@pytest.mark.parametrize(("motion", "behavior"), [("no-preference", "smooth"), ("reduce", "auto")])
def test_a_new_question_scrolls_into_view_smoothly_unless_less_motion_is_asked_for(browser, fake, motion, behavior):
    """WCAG 2.3.3: the system's "reduce motion" setting turns the smooth scroll to a new question into a jump."""
    _, url = fake
    page = browser.new_context(viewport={"width": 1280, "height": 900}, reduced_motion=motion).new_page()
    page.add_init_script("""
        window.scrolls = [];
        const scroll = Element.prototype.scrollIntoView;
        Element.prototype.scrollIntoView = function (options) {
            window.scrolls.push(options);
            scroll.call(this, options);
        };
    """)
    page.goto(url + "/")
    log_in_as(page, "demo")
    ask(page, "How do I add a user?")
    asked = [options for options in page.evaluate("window.scrolls") if options and "behavior" in options]
    assert [options["behavior"] for options in asked] == [behavior]
