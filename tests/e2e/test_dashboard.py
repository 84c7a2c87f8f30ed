"""The analytics dashboard in a real browser (Debian's chromium driven by Playwright).

Against the whole system started with `cairn up`: seeded chat traffic and feedback reach analytics through
the event stream, and an analyst sees the seeded counts in the tiles and every chart drawn; a plain user
gets 403 for the page over HTTP and the analysts-only message in the browser.

Against the gateway and a stand-in analytics service with known figures: how each figure is written,
questions with markup shown as text, the model filter, the CSV export, the empty state, log-out, and a
session store outage while the page opens (a gateway on its own redis-server).
"""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlencode

import httpx
import pytest
from playwright.sync_api import Browser, Page, Route, expect

from services.gateway.main import create_app
from services.gateway.settings import Settings
from shared.errors import RETRY_AFTER_S
from tests.e2e.conftest import DRAWN_TEXT, PASSWORD
from tests.integration.gateway.analytics_stand_in import (
    EXPORT_CSV,
    MARKUP_QUERY,
    StandInState,
    analytics_stand_in,
    seed_users,
)
from tests.integration.gateway.analytics_stand_in import PASSWORD as STAND_IN_PASSWORD
from tests.own_redis import OwnRedis
from tests.support import own_outbox, serve_in_thread, wait_until

pytestmark = pytest.mark.e2e

CHARTS = ("volume", "latency", "answer-rate", "confidence", "top-queries", "gaps", "documents")
QUESTIONS = ("How do I add a user?", "How do I list users?", "What does the gateway do?", "How do I start Cairn?")
NONSENSE = "zxqv wplkj frobnitz quuxly?"  # matches no document: a content gap
LOAD_TIMEOUT_MS = 30_000


def open_page(browser: Browser, url: str, *, width: int = 1280, **context) -> tuple[Page, list[str]]:
    """A fresh tab (its own sessionStorage) that records script errors and CSP violations; `context` sets
    more of the browser context, such as its timezone_id and locale."""
    page = browser.new_context(viewport={"width": width, "height": 900}, accept_downloads=True, **context).new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda m: problems.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(url)
    return page, problems


def log_in(page: Page, username: str, password: str) -> None:
    expect(page.get_by_role("heading", name="Log in to Cairn analytics")).to_be_visible()
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Log in").click()


def wait_for_figures(page: Page) -> None:
    expect(page.get_by_test_id("dashboard")).to_have_attribute("data-state", "ready", timeout=LOAD_TIMEOUT_MS)


def kpi(page: Page, name: str) -> str:
    return page.get_by_test_id(f"kpi-{name}").inner_text()


def chart_drawn(page: Page, name: str) -> bool:
    return page.get_by_test_id(f"chart-{name}").locator("svg.main-svg").count() > 0


def percent(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f} %"


def bearer(gateway: str, username: str, password: str) -> dict[str, str]:
    response = httpx.post(f"{gateway}/auth/login", json={"username": username, "password": password}, timeout=30)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


# --- the whole system -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_user(cairn) -> tuple[str, str]:
    name, password = f"pat{time.monotonic_ns() % 100000}", "plain-user-password"
    result = cairn.cli("user", "add", name, "--role", "user", "--password-stdin", stdin=password + "\n")
    assert result.returncode == 0, result.stdout + result.stderr
    return name, password


def test_an_analyst_sees_the_seeded_traffic(cairn, browser, plain_user, tmp_path):
    start = datetime.now(UTC) - timedelta(seconds=1)
    asker = bearer(cairn.gateway, *plain_user)
    request_ids = []
    for question in (*QUESTIONS, NONSENSE):
        response = httpx.post(f"{cairn.gateway}/api/chat", json={"query": question}, headers=asker, timeout=120)
        assert response.status_code == 200, response.text
        request_ids.append(response.json()["metadata"]["request_id"])
    rated = httpx.post(
        f"{cairn.gateway}/api/feedback",
        json={"request_id": request_ids[0], "rating": 1, "comment": "Just what I needed."},
        headers=asker,
        timeout=30,
    )
    assert rated.status_code in (200, 202, 204), rated.text
    end = datetime.now(UTC) + timedelta(minutes=2)
    seeded = len(request_ids)

    analyst = bearer(cairn.gateway, "demo", PASSWORD)
    window = {"from": start.isoformat(), "to": end.isoformat()}

    def summary() -> dict:
        response = httpx.get(f"{cairn.gateway}/api/analytics/summary", params=window, headers=analyst, timeout=30)
        return response.json() if response.status_code == 200 else {}

    def arrived() -> bool:
        figures = summary()
        return figures.get("completed") == seeded and figures.get("feedback", {}).get("ratings") == 1

    wait_until(arrived, timeout=60, interval=1, what="analytics to hold the seeded requests and the rating")
    figures = summary()
    gaps = httpx.get(f"{cairn.gateway}/api/analytics/gaps", params=window, headers=analyst, timeout=30).json()

    page, problems = open_page(browser, f"{cairn.gateway}/dashboard?{urlencode(window)}")
    log_in(page, "demo", PASSWORD)
    wait_for_figures(page)
    assert kpi(page, "queries") == str(seeded)
    assert kpi(page, "distinct-users") == "1"
    assert kpi(page, "answered-rate") == percent(figures["answered_rate"])
    assert kpi(page, "no-answer-rate") == percent(figures["no_answer_rate"])
    assert kpi(page, "failure-rate") == "0.0 %"
    assert kpi(page, "latency-p50").endswith(" ms")
    assert kpi(page, "feedback-score") == "+1.00"
    for name in CHARTS:
        if name == "gaps" and not gaps["items"]:
            expect(page.get_by_test_id("chart-gaps")).to_have_text("No data in this range")
        else:
            assert chart_drawn(page, name), f"chart {name} was not drawn"
    expect(page.get_by_test_id("feedback-list")).to_contain_text("Just what I needed.")
    expect(page.get_by_test_id("model-row")).not_to_have_count(0)
    page.screenshot(path=tmp_path / "dashboard.png", full_page=True)
    assert problems == [], problems


def test_a_plain_user_gets_403_and_the_analysts_only_message(cairn, browser, plain_user):
    response = httpx.get(f"{cairn.gateway}/dashboard", headers=bearer(cairn.gateway, *plain_user), timeout=30)
    assert response.status_code == 403 and response.json()["message"] == "the dashboard is for analysts only"

    page, problems = open_page(browser, f"{cairn.gateway}/dashboard")
    analytics_calls: list[str] = []
    page.on("request", lambda r: analytics_calls.append(r.url) if "/api/analytics/" in r.url else None)
    log_in(page, *plain_user)
    expect(page.get_by_test_id("analysts-only")).to_be_visible()
    expect(page.get_by_role("heading", name="Analysts only")).to_be_visible()
    expect(page.get_by_test_id("dashboard")).to_be_hidden()
    assert analytics_calls == [] and problems == [], (analytics_calls, problems)


# --- the gateway and a stand-in analytics service ------------------------------------------------
@pytest.fixture(scope="module")
def stand_in() -> StandInState:
    return StandInState()


@pytest.fixture(scope="module")
def gateway(stand_in, redis_url, amqp_url) -> Iterator[str]:
    with serve_in_thread(analytics_stand_in(stand_in)) as analytics:
        with serve_in_thread(create_app(gateway_settings(redis_url, amqp_url, analytics))) as url:
            yield url


def gateway_settings(redis_url: str, amqp_url: str, analytics_url: str, **overrides) -> Settings:
    """A gateway of its own: a fresh Redis prefix, exchange and queue, the stand-in behind it."""
    name = f"test-dashboard-{uuid.uuid4().hex[:10]}"
    seed_users(redis_url, name)
    return Settings(
        redis_url=redis_url,
        redis_prefix=name,
        analytics_url=analytics_url,
        amqp_url=amqp_url,
        events_exchange=f"{name}.events",
        analytics_queue=f"{name}.analytics",
        outbox_path=own_outbox(),
        **overrides,
    )


@pytest.fixture
def figures(stand_in) -> StandInState:
    stand_in.seen.clear()
    stand_in.empty = stand_in.unavailable = False
    return stand_in


def test_each_figure_is_written_with_its_unit_and_user_text_stays_text(gateway, browser, figures, tmp_path):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    expected = {
        "queries": "42", "distinct-users": "5", "answered-rate": "82.5 %", "no-answer-rate": "10.0 %",
        "failure-rate": "5.0 %", "latency-p50": "412 ms", "latency-p95": "1,830 ms", "latency-p99": "2,951 ms",
        "mean-citations": "2.40", "supported-citation-rate": "87.5 %", "feedback-score": "+0.33", "tokens": "59,999",
    }
    assert {name: kpi(page, name) for name in expected} == expected
    expect(page.get_by_test_id("tile-failure-rate")).to_contain_text("retrieval 1, generation 1")
    assert all(chart_drawn(page, name) for name in CHARTS)
    expect(page.get_by_test_id("never-cited")).to_have_text("Never cited in this range: docs/benchmarks.md, docs/operations.md.")
    expect(page.get_by_test_id("model-row")).to_have_count(2)
    expect(page.get_by_test_id("model-row").first).to_contain_text("offline")
    costs = page.get_by_test_id("model-row").locator("td:last-child")  # a dash for a model without a price
    expect(costs).to_have_text(["—", "0.003344"])
    expect(page.get_by_test_id("feedback-item")).to_have_count(3)
    expect(page.get_by_test_id("feedback-list")).to_contain_text(MARKUP_QUERY)  # the comment, as text
    assert page.title() == "Cairn analytics" and page.locator("img[src=x]").count() == 0
    # Questions in the charts are drawn as typed: no markup of theirs becomes a link (or any element).
    top_queries = page.get_by_test_id("chart-top-queries")
    expect(top_queries).to_contain_text('<a href="https://example.com/login">')
    assert top_queries.locator("a").count() == 0
    page.screenshot(path=tmp_path / "dashboard-stand-in.png", full_page=True)

    queries = [query for path, query, _ in figures.seen if path == "/analytics/timeseries"]
    assert "bucket=hour" in queries[-1], "24 hours (the default range) are drawn per hour"

    page.get_by_test_id("model").select_option("gpt-4o-mini")
    wait_for_figures(page)
    assert "model=gpt-4o-mini" in page.url
    assert "model=gpt-4o-mini" in [query for path, query, _ in figures.seen if path == "/analytics/summary"][-1]
    expect(page.get_by_test_id("model-row")).to_have_count(1)

    with page.expect_download() as download:
        page.get_by_test_id("export-csv").click()
    assert download.value.suggested_filename == "cairn-requests.csv"
    assert Path(download.value.path()).read_text(encoding="utf-8-sig") == EXPORT_CSV
    assert problems == [], problems


def test_the_export_of_a_preset_range_covers_the_range_the_figures_show(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard?range=1h")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    page.wait_for_timeout(1100)  # the clock moves on between showing the figures and exporting them
    with page.expect_download():
        page.get_by_test_id("export-csv").click()
    asked = {path: dict(parse_qsl(query)) for path, query, _ in figures.seen}
    shown, exported = asked["/analytics/summary"], asked["/analytics/export.csv"]
    assert (exported["from"], exported["to"]) == (shown["from"], shown["to"])

    # Switching to a custom range starts from the range shown too.
    page.get_by_test_id("range").select_option("custom")
    wait_for_figures(page)
    custom = dict(parse_qsl([query for path, query, _ in figures.seen if path == "/analytics/summary"][-1]))
    assert (custom["from"], custom["to"]) == (shown["from"], shown["to"])
    assert problems == [], problems


def test_the_exported_file_names_its_encoding_for_spreadsheets(gateway, browser, figures):
    # Excel reads a CSV file without a byte order mark in the computer's own code page: "Ünïcode é" would
    # open as "ÃœnÃ¯code Ã©". The API's file has none (scripts read plain UTF-8); the button's file has one.
    exported = "request_id,query\nr1,Où est la clé ? 鍵はどこ\n"
    page, problems = open_page(browser, f"{gateway}/dashboard")
    page.route(
        "**/api/analytics/export.csv?*",
        lambda route: route.fulfill(
            status=200, body=exported.encode(), content_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="cairn-requests.csv"'},
        ),
    )
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    with page.expect_download() as download:
        page.get_by_test_id("export-csv").click()
    assert Path(download.value.path()).read_bytes() == b"\xef\xbb\xbf" + exported.encode()
    assert problems == [], problems


def test_a_range_with_no_data_shows_zeros_dashes_and_says_so_in_every_chart(gateway, browser, figures):
    figures.empty = True
    page, problems = open_page(browser, f"{gateway}/dashboard?range=1h", width=375)
    log_in(page, "ada", STAND_IN_PASSWORD)
    wait_for_figures(page)
    assert kpi(page, "queries") == "0" and kpi(page, "tokens") == "0"
    assert kpi(page, "answered-rate") == "—" and kpi(page, "latency-p95") == "—" and kpi(page, "feedback-score") == "—"
    for name in CHARTS:
        expect(page.get_by_test_id(f"chart-{name}")).to_have_text("No data in this range")
    expect(page.get_by_test_id("models-table")).to_contain_text("No data in this range")
    expect(page.get_by_test_id("status")).to_have_text("No questions were asked in this range.")
    assert "bucket=minute" in [q for p, q, _ in figures.seen if p == "/analytics/timeseries"][-1]
    assert page.evaluate("document.documentElement.scrollWidth") <= 375, "the page scrolls sideways"
    assert problems == [], problems


def test_a_custom_range_is_kept_in_the_address_and_a_reversed_one_is_refused(gateway, browser, figures):
    window = {"from": "2026-01-01T09:00:00.000Z", "to": "2026-01-01T12:00:00.000Z"}
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    expect(page.get_by_test_id("range")).to_have_value("custom")
    sent = figures.seen[-1][1]
    assert "from=2026-01-01T09%3A00%3A00.000Z" in sent and "to=2026-01-01T12%3A00%3A00.000Z" in sent

    page.reload()  # the tab keeps its session and the address keeps the range
    wait_for_figures(page)
    expect(page.get_by_test_id("range")).to_have_value("custom")

    seen = len(figures.seen)
    page.get_by_test_id("from").fill(page.get_by_test_id("to").input_value())
    page.get_by_test_id("from").dispatch_event("change")
    expect(page.get_by_test_id("status")).to_have_text("The start of the range must come before its end.")
    assert len(figures.seen) == seen, "no report is asked for an empty range"
    start = page.get_by_label("From")  # a screen reader says what is wrong with it whenever it is focused
    expect(start).to_have_attribute("aria-invalid", "true")
    expect(start).to_have_accessible_description("The start of the range must come before its end.")

    page.get_by_test_id("from").fill(window["from"].removesuffix(".000Z"))
    page.get_by_test_id("from").dispatch_event("change")
    expect(start).not_to_have_attribute("aria-invalid", "true")
    assert problems == [], problems


def summary_range(figures: StandInState) -> tuple[str, str]:
    asked = dict(parse_qsl([query for path, query, _ in figures.seen if path == "/analytics/summary"][-1]))
    return asked["from"], asked["to"]


def test_choosing_custom_again_starts_from_the_range_shown_so_far(gateway, browser, figures):
    window = {"from": "2026-01-01T09:00:00.000Z", "to": "2026-01-01T12:00:00.000Z"}
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    page.get_by_test_id("range").select_option("7d")
    wait_for_figures(page)
    shown = summary_range(figures)
    page.get_by_test_id("range").select_option("custom")  # the inputs still hold the custom range of before
    wait_for_figures(page)
    assert summary_range(figures) == shown
    assert f"from={shown[0]}" in unquote(page.url) and f"to={shown[1]}" in unquote(page.url)
    assert problems == [], problems


def test_a_custom_range_from_the_hour_berlin_turns_its_clocks_back_through_stays_when_the_model_changes(
    gateway, browser, figures
):
    # 02:30 comes twice in Berlin on 25 October: at 00:30 UTC (CEST) and at 01:30 UTC (CET), the one shared here.
    window = {"from": "2026-10-25T01:30:00.000Z", "to": "2026-10-25T03:00:00.000Z"}
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}",
                               timezone_id="Europe/Berlin", locale="en-GB")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    expect(page.get_by_test_id("from")).to_have_value("2026-10-25T02:30")
    page.get_by_test_id("model").select_option("gpt-4o-mini")
    wait_for_figures(page)
    assert summary_range(figures) == (window["from"], window["to"])

    # A range with milliseconds, which the inputs cannot show, is kept whole too.
    page.get_by_test_id("range").select_option("1h")
    wait_for_figures(page)
    page.get_by_test_id("range").select_option("custom")
    wait_for_figures(page)
    shown = summary_range(figures)
    page.get_by_test_id("refresh").click()
    wait_for_figures(page)
    assert summary_range(figures) == shown
    assert problems == [], problems


def test_the_pending_requests_are_counted_with_separators(gateway, browser, figures):
    def with_many_pending(route: Route) -> None:
        response = route.fetch()
        route.fulfill(response=response, json={**response.json(), "queries": 5040})

    page, problems = open_page(browser, f"{gateway}/dashboard")
    page.route("**/api/analytics/summary?*", with_many_pending)
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    expect(page.get_by_test_id("tile-queries")).to_contain_text("40 with an outcome, 5,000 pending")
    assert problems == [], problems


def hold_plotly(page: Page) -> list[Route]:
    """Hold the page's request for plotly.js (its charts wait for it) until the test continues it."""
    held: list[Route] = []
    page.route("**/web/vendor/plotly.min.js", lambda route: held.append(route))
    return held


def wait_for_held(page: Page, held: list[Route]) -> Route:
    for _ in range(200):
        if held:
            return held[0]
        page.wait_for_timeout(50)
    raise AssertionError("the page never asked for plotly.js")


def test_a_range_refused_while_a_load_runs_keeps_its_message(gateway, browser, figures):
    window = {"from": "2026-01-01T09:00:00.000Z", "to": "2026-01-01T12:00:00.000Z"}
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}")
    held = hold_plotly(page)
    log_in(page, "ana", STAND_IN_PASSWORD)
    plotly = wait_for_held(page, held)
    page.get_by_test_id("from").fill(page.get_by_test_id("to").input_value())
    page.get_by_test_id("from").dispatch_event("change")
    refused = "The start of the range must come before its end."
    expect(page.get_by_test_id("status")).to_have_text(refused)
    plotly.continue_()
    wait_for_figures(page)  # the load under way shows the figures of the range before
    assert all(chart_drawn(page, name) for name in CHARTS)
    expect(page.get_by_test_id("status")).to_have_text(refused)
    assert problems == [], problems


def test_the_charts_of_an_older_load_are_not_drawn_after_a_newer_load_failed(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    held = hold_plotly(page)
    log_in(page, "ana", STAND_IN_PASSWORD)
    plotly = wait_for_held(page, held)  # the first load's figures are in, its charts wait for plotly
    unavailable = {"error": "database_unavailable", "message": "database is unavailable"}
    page.route("**/api/analytics/**", lambda route: route.fulfill(status=503, json=unavailable))
    page.get_by_test_id("range").select_option("1h")
    expect(page.get_by_test_id("dashboard")).to_have_attribute("data-state", "error")
    plotly.continue_()
    wait_until(lambda: page.evaluate("() => window.Plotly !== undefined"), timeout=30, what="plotly.js to load")
    page.wait_for_timeout(300)  # time enough for the first load's charts, were they still drawn
    assert page.locator(".chart svg").count() == 0
    assert page.get_by_test_id("kpi-queries").text_content() == "—"
    expect(page.get_by_test_id("status")).to_contain_text("The figures are unavailable right now")
    assert problems == [], problems


def test_the_confidence_donut_labels_only_the_levels_that_occurred(gateway, browser, figures):
    def without_low_confidence(route: Route) -> None:
        response = route.fetch()
        summary = response.json()
        summary["confidence"]["low"] = 0
        route.fulfill(response=response, json=summary)

    page, problems = open_page(browser, f"{gateway}/dashboard")
    page.route("**/api/analytics/summary?*", without_low_confidence)
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    labels = page.get_by_test_id("chart-confidence").locator("text.slicetext").all_text_contents()
    assert labels and not [label for label in labels if label.startswith("Low")], labels
    assert problems == [], problems


def test_a_range_too_long_for_day_buckets_still_shows_its_figures(gateway, browser, figures):
    window = {"from": "1990-01-01T00:00:00.000Z", "to": "2026-01-01T00:00:00.000Z"}  # 13,149 days
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    assert kpi(page, "queries") == "42"
    for name in ("volume", "latency", "answer-rate"):
        expect(page.get_by_test_id(f"chart-{name}")).to_have_text(
            "This range is too long to draw over time (more than 10,000 days)")
    assert all(chart_drawn(page, name) for name in ("confidence", "top-queries", "gaps", "documents"))
    assert [path for path, _, _ in figures.seen if path == "/analytics/timeseries"] == []
    # The day buckets the analytics service counts (aligned on UTC midnight, to the instant before `to`).
    buckets = page.evaluate("""async () => {
        const { bucketFor } = await import("/web/dashboard-range.js");
        const day = 86_400_000, start = Date.UTC(2000, 0, 1);
        return [start + 10_000 * day, start + 10_000 * day + 1, start + 9_999 * day + 1]
            .map((end) => bucketFor(new Date(start), new Date(end)))
            .concat(bucketFor(new Date(start + 1), new Date(start + 10_000 * day)));
    }""")
    assert buckets == ["day", None, "day", "day"]
    assert problems == [], problems


def time_series_query(figures: StandInState) -> dict[str, str]:
    return dict(parse_qsl([query for path, query, _ in figures.seen if path == "/analytics/timeseries"][-1]))


def volume_bars(page: Page) -> dict[str, list[float]]:
    """The volume chart's x labels, and the centres of its bars with a height, in pixels."""
    return page.evaluate("""() => {
        const chart = document.querySelector("[data-testid=chart-volume]");
        const centres = [...chart.querySelectorAll(".trace.bars .point path")]
            .map((bar) => bar.getBoundingClientRect())
            .filter((box) => box.height > 0)
            .map((box) => Math.round(box.x + box.width / 2));
        return { labels: chart.data[0].x, centres: [...new Set(centres)] };
    }""")


def test_each_hour_of_a_night_new_york_turns_its_clocks_back_has_its_own_bar(gateway, browser, figures, tmp_path):
    # 22:00 on 31 October to 03:00 on 1 November in New York: 01:00 comes twice, at 05:00 and 06:00 UTC.
    window = {"from": "2026-11-01T02:00:00.000Z", "to": "2026-11-01T08:00:00.000Z"}
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}",
                               timezone_id="America/New_York", locale="en-US")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    assert time_series_query(figures) == {**window, "bucket": "hour", "tz": "America/New_York"}
    bars = volume_bars(page)
    assert bars["labels"] == ["Oct 31, 10:00 PM", "Oct 31, 11:00 PM", "Nov 1, 12:00 AM", "Nov 1, 01:00 AM EDT",
                              "Nov 1, 01:00 AM EST", "Nov 1, 02:00 AM"]
    assert len(bars["centres"]) == 5, bars  # the stand-in's counts 3, 5, 0, 8, 2, 6: five bars, none on another
    expect(page.get_by_test_id("range-label")).to_contain_text("(local time, America/New_York)")
    page.get_by_test_id("chart-volume").screenshot(path=tmp_path / "volume-new-york.png")
    # 10,000 UTC days touch 10,001 of New York's, more than the time series answers: no day buckets then.
    buckets = page.evaluate("""async () => {
        const { bucketFor } = await import("/web/dashboard-range.js");
        const day = 86_400_000, start = Date.UTC(2000, 0, 1);
        return [bucketFor(new Date(start), new Date(start + 10_000 * day)),
                bucketFor(new Date(start + 5 * 3_600_000), new Date(start + 10_000 * day))];
    }""")
    assert buckets == [None, "day"]
    assert problems == [], problems


def test_hours_in_india_start_on_its_full_hours(gateway, browser, figures):
    window = {"from": "2026-01-01T00:00:00.000Z", "to": "2026-01-01T04:00:00.000Z"}
    page, problems = open_page(browser, f"{gateway}/dashboard?{urlencode(window)}",
                               timezone_id="Asia/Kolkata", locale="en-GB")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    sent = time_series_query(figures)
    assert sent["tz"] in ("Asia/Kolkata", "Asia/Calcutta"), sent  # Chromium still reports the older name
    hours = ["1 Jan, 05:00", "1 Jan, 06:00", "1 Jan, 07:00", "1 Jan, 08:00", "1 Jan, 09:00"]  # 05:30 to 09:30 there
    assert volume_bars(page)["labels"] == hours
    assert problems == [], problems


def test_never_cited_documents_beyond_the_list_are_counted(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    documents = [q for path, q, _ in figures.seen if path == "/analytics/documents"][-1]
    assert "limit=10" in documents
    texts = page.evaluate("""async () => {
        const { renderNeverCited } = await import("/web/dashboard-tiles.js");
        const node = document.createElement("p");
        const names = (n) => Array.from({ length: n }, (_, i) => `doc-${i}`);
        return [
            { never_cited: names(10), never_cited_total: 1234 },
            { never_cited: names(2), never_cited_total: 2 },
            { never_cited: [], never_cited_total: 0 },
        ].map((report) => { renderNeverCited(node, report); return [node.textContent, node.hidden]; });
    }""")
    listed = ", ".join(f"doc-{i}" for i in range(10))
    assert texts == [
        [f"Never cited in this range: {listed} and 1,224 more.", False],
        ["Never cited in this range: doc-0, doc-1.", False],
        ["", True],
    ]
    assert problems == [], problems


def test_a_bidi_override_in_a_doc_id_reverses_none_of_the_never_cited_list_around_it(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    # A doc_id that reverses what follows it (U+202E), closing first any isolate it is put in (U+2069).
    reversing = "pump\u202e man\u2069\u202eual.md"
    page.evaluate("""async (docIds) => {
        const { renderNeverCited } = await import("/web/dashboard-tiles.js");
        renderNeverCited(document.querySelector("[data-testid=never-cited]"), { never_cited: docIds, never_cited_total: 3 });
    }""", [reversing, "docs/faq.md"])
    listed = page.get_by_test_id("never-cited")
    expect(listed).to_have_text(f"Never cited in this range: {reversing}, docs/faq.md and 1 more.")
    drawn = listed.evaluate(DRAWN_TEXT)
    assert drawn.startswith("Never cited in this range: ") and drawn.endswith(", docs/faq.md and 1 more."), drawn
    assert problems == [], problems


@pytest.mark.parametrize("name", ["constructor", "__proto__"])
def test_a_range_name_every_object_has_is_no_preset_and_gives_the_last_24_hours(gateway, browser, figures, name):
    page, problems = open_page(browser, f"{gateway}/dashboard?range={name}")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    expect(page.get_by_test_id("range")).to_have_value("24h")
    assert kpi(page, "queries") == "42" and "range=24h" in page.url
    assert problems == [], problems


def test_logging_in_with_the_keyboard_puts_the_focus_on_the_dashboard_heading(gateway, browser, figures):
    """The form that held the focus disappears: the focus goes where a keyboard or screen reader user continues."""
    page, problems = open_page(browser, f"{gateway}/dashboard")
    page.get_by_label("User name").fill("ana")
    page.get_by_label("Password", exact=True).fill(STAND_IN_PASSWORD)
    page.get_by_label("Password", exact=True).press("Enter")
    expect(page.get_by_role("heading", name="Questions and answers")).to_be_focused()
    page.keyboard.press("Tab")  # on into the dashboard's own controls, not back at the top of the page
    assert page.evaluate("document.activeElement.closest('[data-testid=dashboard]') !== null")
    assert problems == [], problems


def test_log_out_leaves_none_of_the_figures_in_the_tab(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in to Cairn analytics")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('cairn.token')") is None
    assert page.get_by_test_id("kpi-queries").text_content() == "—"
    hidden = page.get_by_test_id("dashboard").text_content()
    assert "Exactly the command I needed." not in hidden and "How do I add a user?" not in hidden
    assert page.locator(".chart svg").count() == 0
    assert problems == [], problems


def test_an_address_with_a_model_chosen_still_offers_the_other_models_of_the_range(gateway, browser, figures):
    """A reloaded or shared view of one model: the analyst switches to another model in one step."""
    page, problems = open_page(browser, f"{gateway}/dashboard?range=24h&model=gpt-4o-mini")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    model = page.get_by_test_id("model")
    expect(model).to_have_value("gpt-4o-mini")
    expect(model.locator("option")).to_have_text(["All models", "offline", "gpt-4o-mini"])
    expect(page.get_by_test_id("model-row")).to_have_count(1)  # the figures are still those of the chosen model
    model.select_option("offline")
    wait_for_figures(page)
    assert "model=offline" in page.url and kpi(page, "queries") == "42"
    expect(model.locator("option")).to_have_text(["All models", "offline", "gpt-4o-mini"])
    assert problems == [], problems


def test_too_many_failed_logins_say_how_long_to_wait_as_the_chat_page_does(browser, redis_url, amqp_url):
    """The gateway refuses a user name's logins for a while after failed ones (429 with Retry-After)."""
    with serve_in_thread(analytics_stand_in(StandInState())) as analytics:
        settings = gateway_settings(redis_url, amqp_url, analytics, login_attempts_per_username=1)
        with serve_in_thread(create_app(settings)) as url:
            page, problems = open_page(browser, f"{url}/dashboard")
            log_in(page, "ana", "not-the-password")
            expect(page.locator("#login-message")).to_have_text("Wrong user name or password.")
            log_in(page, "ana", STAND_IN_PASSWORD)
            expect(page.locator("#login-message")).to_have_text(
                re.compile(r"^Too many requests\. Try again in \d+ seconds\.$")
            )
            assert problems == [], problems


def test_a_session_store_outage_when_the_page_opens_keeps_the_session(browser, amqp_url):
    """Redis hangs while an analyst reloads the page: /auth/me answers 503, which says nothing about the
    session. The page keeps it, says what is down, and shows the figures by itself once Redis is back."""
    redis = OwnRedis()
    redis.start()
    try:
        with serve_in_thread(analytics_stand_in(StandInState())) as analytics:
            settings = gateway_settings(redis.url, amqp_url, analytics, redis_timeout_s=0.5)
            with serve_in_thread(create_app(settings)) as url:
                page, problems = open_page(browser, f"{url}/dashboard")
                log_in(page, "ana", STAND_IN_PASSWORD)
                wait_for_figures(page)
                token = page.evaluate("sessionStorage.getItem('cairn.token')")

                redis.freeze()
                page.reload()
                dashboard = page.get_by_test_id("dashboard")
                expect(dashboard).to_have_attribute("data-state", "error", timeout=LOAD_TIMEOUT_MS)
                expect(page.get_by_test_id("status")).to_have_text(
                    "The figures are unavailable right now (the session store (Redis) is unavailable). "
                    f"Trying again in {RETRY_AFTER_S} seconds.")
                assert page.evaluate("sessionStorage.getItem('cairn.token')") == token

                redis.thaw()
                wait_for_figures(page)
                assert kpi(page, "queries") == "42"
                expect(page.get_by_test_id("whoami")).to_have_text("ana")
                assert problems == [], problems
    finally:
        redis.stop()


def test_figures_refused_for_a_while_load_again_by_themselves_when_the_gateway_said(gateway, browser, figures):
    """A page left open through an outage comes back by itself: after a 503, it asks again once the
    Retry-After has passed (the stand-in's is 7 seconds), not sooner, and says so meanwhile."""
    def summaries_asked() -> int:
        return len([path for path, _, _ in figures.seen if path == "/analytics/summary"])

    figures.unavailable = True
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    expect(page.get_by_test_id("dashboard")).to_have_attribute("data-state", "error", timeout=LOAD_TIMEOUT_MS)
    expect(page.get_by_test_id("status")).to_have_text(
        "The figures are unavailable right now (analytics is unavailable: database is unavailable). "
        "Trying again in 7 seconds.")
    page.wait_for_timeout(5_000)
    assert summaries_asked() == 1

    figures.unavailable = False
    wait_for_figures(page)
    assert summaries_asked() == 2 and kpi(page, "queries") == "42"
    expect(page.get_by_test_id("status")).to_have_text("")
    assert problems == [], problems


def test_the_chart_buttons_send_no_figures_to_an_outside_service(gateway, browser, figures):
    """plotly.js offers "Share chart...", which opens Plotly Cloud and posts the chart to it, the users'
    questions included: nothing of the dashboard leaves the gateway."""
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    chart = page.get_by_test_id("chart-top-queries")
    chart.hover()
    expect(chart.get_by_role("button", name="Download plot as a PNG")).to_be_visible()
    assert page.locator(".modebar-btn").count() > 0
    assert page.locator('.modebar-btn[data-title^="Share"]').count() == 0
    assert problems == [], problems


def test_the_skip_link_is_offered_only_with_the_figures(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    expect(page.get_by_label("User name")).to_be_focused()
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.textContent") != "Skip to the figures", "a link to hidden figures"
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    page.get_by_role("link", name="Chat").focus()
    page.keyboard.press("Shift+Tab")
    expect(page.get_by_role("link", name="Skip to the figures")).to_be_focused()
    assert problems == [], problems


# Each chart's drawing (its svg) as [left, top, width, height], and the box of its chart area.
CHART_BOXES = """() => Object.fromEntries([...document.querySelectorAll('.chart')].map((chart) => {
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return [r.left, r.top, r.width, r.height].map(Math.round);
  };
  const svg = chart.querySelector('svg.main-svg');
  return [chart.id, { svg: svg && box(svg), area: box(chart) }];
}))"""


@pytest.mark.parametrize(("first", "then"), [(1280, 1000), (375, 1280)], ids=["narrower", "phone-to-desktop"])
def test_a_resized_window_redraws_each_chart_at_its_height_inside_its_card(gateway, browser, figures, first, then):
    page, problems = open_page(browser, f"{gateway}/dashboard", width=first)
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    heights = {name: boxes["svg"][3] for name, boxes in page.evaluate(CHART_BOXES).items()}
    page.set_viewport_size({"width": then, "height": 900})

    def redrawn() -> dict | None:
        boxes = page.evaluate(CHART_BOXES)
        return boxes if all(b["svg"][2] == b["area"][2] for b in boxes.values()) else None

    wait_until(redrawn, timeout=10, what="the charts to take the new width")
    page.wait_for_timeout(500)  # plotly's own resize runs in steps: let them all end
    boxes = page.evaluate(CHART_BOXES)
    assert {name: b["svg"][3] for name, b in boxes.items()} == heights, "a chart changed its height"
    assert {name: b["svg"] for name, b in boxes.items()} == {name: b["area"] for name, b in boxes.items()}, \
        "a chart is drawn outside its area, over the card below it"
    assert problems == [], problems


def test_each_chart_gives_its_figures_as_a_table_to_the_keyboard(gateway, browser, figures):
    """A chart's values show on pointing only: its table gives them to a keyboard and a screen reader too."""
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    top = page.get_by_role("figure", name="Top queries")
    summary = top.get_by_text("Show as a table")
    summary.focus()
    page.keyboard.press("Enter")
    table = top.get_by_role("table", name="Top queries")
    expect(table.get_by_role("columnheader")).to_have_text(["Question", "Answered", "Not answered"])
    expect(table.get_by_role("row", name=re.compile(r"^1\. How do I add a user\?"))).to_contain_text("9")
    expect(table.get_by_role("rowheader", name=f"3. {MARKUP_QUERY}")).to_be_visible()  # whole, and as typed
    for name in ("Volume over time", "Latency percentiles over time", "Answer rate over time", "Confidence mix",
                 "Most cited documents", "Content gaps: unanswered and low-confidence queries"):
        closed = page.get_by_role("figure", name=name).get_by_role("table", name=name, include_hidden=True)
        expect(closed).to_have_count(1)
    confidence = page.get_by_role("figure", name="Confidence mix").get_by_role("table", include_hidden=True)
    headings = confidence.get_by_role("columnheader", include_hidden=True)
    expect(headings).to_have_text(["Confidence", "Responses", "Share"])
    assert problems == [], problems


def test_a_range_with_no_data_offers_no_empty_tables(gateway, browser, figures):
    figures.empty = True
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    expect(page.get_by_test_id("chart-top-queries")).to_have_text("No data in this range")
    expect(page.get_by_text("Show as a table")).to_have_count(0)
    assert problems == [], problems


# The product of the opacities of the focused element and its ancestors: 0 when it cannot be seen.
SEEN = """() => { let seen = 1;
  for (let e = document.activeElement; e; e = e.parentElement) seen *= Number(getComputedStyle(e).opacity);
  return seen; }"""


def test_a_chart_button_the_keyboard_reaches_is_shown_with_the_pages_focus_ring(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard", color_scheme="dark")
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    page.mouse.move(0, 0)  # over no chart: plotly shows the buttons of a chart under the pointer
    page.get_by_test_id("export-csv").focus()
    page.keyboard.press("Tab")
    expect(page.get_by_test_id("chart-volume").get_by_role("button", name="Download plot as a PNG")).to_be_focused()
    wait_until(lambda: page.evaluate(SEEN) == 1, timeout=5, what="the focused chart button to be shown")
    ring = page.evaluate("(({outlineStyle, outlineWidth, outlineColor}) => [outlineStyle, outlineWidth, outlineColor])"
                         "(getComputedStyle(document.activeElement))")
    assert ring == ["solid", "3px", "rgb(140, 196, 255)"], ring  # the page's (dark) focus ring, not plotly's black
    assert problems == [], problems


def test_a_table_wider_than_a_phone_scrolls_sideways_with_the_keyboard(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard", width=320)
    log_in(page, "ana", STAND_IN_PASSWORD)
    wait_for_figures(page)
    models = page.get_by_role("group", name="Models")
    models.focus()
    expect(models).to_be_focused()
    page.keyboard.press("ArrowRight")
    wait_until(lambda: models.evaluate("e => e.scrollLeft") > 0, timeout=5, what="the table to scroll sideways")
    top = page.get_by_role("figure", name="Top queries")
    top.get_by_text("Show as a table").click()
    expect(top.get_by_role("group", name="Top queries")).to_have_attribute("tabindex", "0")
    assert page.evaluate("document.documentElement.scrollWidth") <= 320, "the page scrolls sideways"
    assert problems == [], problems


def test_a_wrong_password_marks_the_password_field_and_says_why_when_it_is_focused(gateway, browser, figures):
    page, problems = open_page(browser, f"{gateway}/dashboard")
    log_in(page, "ana", "not the password")
    password = page.get_by_label("Password", exact=True)
    expect(password).to_be_focused()
    expect(password).to_have_attribute("aria-invalid", "true")
    expect(password).to_have_accessible_description("Wrong user name or password.")
    password.fill(STAND_IN_PASSWORD)
    password.press("Enter")
    wait_for_figures(page)
    page.get_by_role("button", name="Log out").click()
    expect(password).not_to_have_attribute("aria-invalid", "true")
    assert problems == [], problems
