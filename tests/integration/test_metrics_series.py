"""Each service's /metrics, scraped before and after real traffic: the key series move by what the traffic did.

Every app here is the real one from its factory, on real Redis, RabbitMQ, Chroma (embedded) and the MiniLM
model. They share one process, so one prometheus_client registry: every check compares two scrapes of the
service under test, and its own labels (service, route, status) or a value only its traffic can move.
"""
from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
import httpx
import pytest

from services.analytics.main import create_app as create_analytics_app
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.gateway.main import create_app as create_gateway_app
from services.gateway.settings import Settings as GatewaySettings
from services.retrieval.main import create_app as create_retrieval_app
from services.retrieval.settings import Settings as RetrievalSettings
from shared.broker import RabbitEventPublisher
from tests.integration.analytics.event_stream import delete_topology, publish_raw
from tests.integration.chat.llm_stand_in import Script, llm_stand_in
from tests.integration.metrics_scrape import moved, scrape
from tests.support import free_port, serve_in_thread, wait_until
from tests.unit.analytics.analytics_events import submitted
from tests.unit.chat.fakes import ListPublisher

pytestmark = pytest.mark.integration

TOKEN = "metrics-test-token"
HEADERS = {"X-Service-Token": TOKEN, "X-User-Id": "u1", "X-User-Roles": "user"}
USERS = """# Users

## Adding a user

Run `cairn user add NAME --role user` to add a user. The password is read from a prompt.

## Roles

Analysts may read the analytics dashboard; admins may also manage documents.
"""


def dead_url(scheme: str = "http") -> str:
    """Where nothing listens: a free port nobody has bound."""
    return f"{scheme}://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory: pytest.TempPathFactory, embedder) -> Iterator[str]:
    settings = RetrievalSettings(
        service_token=TOKEN, data_dir=tmp_path_factory.mktemp("retrieval"), chroma_collection="metrics-test",
        embedding_cache=True,
    )
    with serve_in_thread(create_retrieval_app(settings, embedder=embedder)) as url:
        yield url


def ingest(url: str, source: str, text: str = USERS) -> None:
    response = httpx.post(f"{url}/documents", json={"text": text, "source": source}, headers=HEADERS, timeout=30)
    assert response.status_code == 200, response.text


def search(url: str, query: str, **extra) -> httpx.Response:
    return httpx.post(f"{url}/search", json={"query": query, **extra}, headers=HEADERS, timeout=30)


def test_retrieval_counts_requests_stages_cache_lookups_and_batches(retrieval_url: str) -> None:
    before = scrape(retrieval_url)
    ingest(retrieval_url, "guide/users.md")
    first = scrape(retrieval_url)
    chunks = moved(before, first, "cairn_retrieval_embedding_cache_lookups_total", cache="document", result="miss")
    assert chunks >= 2  # one per section at least, each new to the document cache
    ingest(retrieval_url, "copy/users.md")  # the same text again: every chunk's vector is read from the cache
    second = scrape(retrieval_url)
    assert moved(first, second, "cairn_retrieval_embedding_cache_lookups_total", cache="document", result="hit") == chunks
    assert moved(first, second, "cairn_retrieval_embedding_cache_lookups_total", cache="document", result="miss") == 0

    run = uuid.uuid4().hex[:8]  # queries no earlier test has put in the shared embedder's LRU
    repeated = f"how do I add a user {run}"
    assert search(retrieval_url, repeated).status_code == 200
    assert search(retrieval_url, repeated).status_code == 200  # the query's vector now comes from the LRU
    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(lambda n: search(retrieval_url, f"who may read the dashboard {run} {n}").status_code, range(4)))
    assert statuses == [200] * 4
    assert search(retrieval_url, "x", top_k=0).status_code == 422
    after = scrape(retrieval_url)

    route = {"service": "retrieval", "route": "/search"}
    assert moved(second, after, "cairn_http_requests_total", **route, status="200") == 6
    assert moved(second, after, "cairn_http_requests_total", **route, status="422") == 1
    assert moved(second, after, "cairn_http_request_duration_seconds_count", **route, status="200") == 6
    assert moved(second, after, "cairn_http_request_duration_seconds_count", **route, status="422") == 1
    for stage in ("encode", "dense", "keyword", "fusion", "fetch"):  # hybrid search, no reranker configured
        assert moved(second, after, "cairn_retrieval_stage_seconds_count", stage=stage) == 6, stage
    assert moved(second, after, "cairn_retrieval_stage_seconds_count", stage="rerank") == 0
    assert moved(second, after, "cairn_retrieval_stage_seconds_sum", stage="encode") > 0
    lookups = "cairn_retrieval_embedding_cache_lookups_total"
    assert moved(second, after, lookups, cache="query", result="hit") == 1
    assert moved(second, after, lookups, cache="query", result="miss") == 5
    # Five distinct queries were encoded, in one to five batches; six nearest-neighbour queries were answered,
    # by Chroma while this replica's ingest was not yet built into its exact scan, by the scan after that.
    assert moved(second, after, "cairn_retrieval_batch_size_sum", batcher="query_encode") == 5
    assert 1 <= moved(second, after, "cairn_retrieval_batch_size_count", batcher="query_encode") <= 5
    nearest = [moved(second, after, "cairn_retrieval_batch_size_sum", batcher=b) for b in ("chroma_search", "exact_scan")]
    assert sum(nearest) == 6 and nearest[1] >= 1, nearest


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[str, Script]]:
    app, script = llm_stand_in()
    with serve_in_thread(app) as url:
        yield url, script


def chat_settings(tmp_path: Path, *, retrieval: str, model_url: str, redis_url: str, **more) -> ChatSettings:
    """Chat with a broker that does not answer, so that its events stay in its outbox for the gauge to show."""
    return ChatSettings(
        service_token=TOKEN, retrieval_url=retrieval, redis_url=redis_url, redis_prefix=f"metrics-{uuid.uuid4().hex[:8]}",
        llm_base_url=f"{model_url}/v1", llm_model="test-model", llm_timeout_s=2.0, llm_max_retries=2,
        llm_backoff_base_s=0.01, llm_backoff_cap_s=0.05, query_reformulation="off",
        amqp_url=f"{dead_url('amqp')}/", data_dir=tmp_path, **more,
    )


def ask(chat_url: str) -> httpx.Response:
    return httpx.post(f"{chat_url}/chat", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)


def last_sse_data(text: str) -> dict:
    data = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return json.loads(data[-1])


def test_chat_counts_stages_tokens_retries_and_its_outbox(
    tmp_path: Path, retrieval_url: str, model: tuple[str, Script], redis_url: str
) -> None:
    ingest(retrieval_url, "chat/users.md")
    url, script = model
    settings = chat_settings(tmp_path, retrieval=retrieval_url, model_url=url, redis_url=redis_url)
    with serve_in_thread(create_chat_app(settings)) as chat_url:
        before = scrape(chat_url)
        script.reset(text="Run `cairn user add NAME --role user` to add a user [1].")
        answered = ask(chat_url)
        script.reset(mode="rate_limit", failures=1, retry_after="0", text=script.text)
        retried = ask(chat_url)
        script.reset(text=script.text)
        streamed = httpx.post(f"{chat_url}/chat/stream", json={"query": "How do I add a user?"}, headers=HEADERS, timeout=30)
        after = scrape(chat_url)

    assert [answered.status_code, retried.status_code, streamed.status_code] == [200, 200, 200]
    bodies = [answered.json(), retried.json(), last_sse_data(streamed.text)]  # a stream ends with the whole response
    assert [b["metadata"]["kind"] for b in bodies] == ["answer"] * 3
    for route, requests in (("/chat", 2), ("/chat/stream", 1)):
        labels = {"service": "chat", "route": route, "status": "200"}
        assert moved(before, after, "cairn_http_requests_total", **labels) == requests
        assert moved(before, after, "cairn_http_request_duration_seconds_count", **labels) == requests
    for stage in ("retrieval", "generation", "citations", "total"):
        assert moved(before, after, "cairn_chat_stage_seconds_count", stage=stage) == 3, stage
    assert moved(before, after, "cairn_chat_stage_seconds_count", stage="reformulation") == 0  # turned off
    total_s = sum(b["metadata"]["timings_ms"]["total"] for b in bodies) / 1000
    assert moved(before, after, "cairn_chat_stage_seconds_sum", stage="total") == pytest.approx(total_s, abs=1e-6)
    for kind in ("prompt", "completion"):
        reported = sum(b["metadata"]["usage"][f"{kind}_tokens"] for b in bodies)
        assert reported > 0 and moved(before, after, "cairn_llm_tokens_total", model="test-model", kind=kind) == reported
    assert moved(before, after, "cairn_llm_retries_total", reason="429") == 1
    # QuerySubmitted and ResponseGenerated per question, held while the broker is unreachable.
    assert moved(before, after, "cairn_outbox_events", service="chat") == 6


def test_chat_reports_its_retrieval_breaker_opening(
    tmp_path: Path, model: tuple[str, Script], redis_url: str
) -> None:
    settings = chat_settings(
        tmp_path, retrieval=dead_url(), model_url=model[0], redis_url=redis_url,
        retrieval_attempts=1, retrieval_breaker_failures=1, retrieval_breaker_cooldown_s=60,
    )
    with serve_in_thread(create_chat_app(settings, publisher=ListPublisher())) as chat_url:  # no outbox to wait on
        before = scrape(chat_url)
        failed = ask(chat_url)
        after = scrape(chat_url)
    assert failed.status_code == 503, failed.text
    assert moved(before, after, "cairn_http_requests_total", service="chat", route="/chat", status="503") == 1
    # 2 = open, from 0 = closed: chat's breaker in front of retrieval, whatever it is named
    opened = [s.labels for s in after.matching("cairn_circuit_breaker_state") if s.value == 2]
    assert opened, after.matching("cairn_circuit_breaker_state")
    assert all(before.value("cairn_circuit_breaker_state", **labels) == 0 for labels in opened)


def test_gateway_counts_requests_and_latency_by_route_and_status(tmp_path: Path, redis_url: str, unique: str) -> None:
    settings = GatewaySettings(
        redis_url=redis_url, redis_prefix=unique, chat_url=dead_url(), amqp_url=f"{dead_url('amqp')}/", data_dir=tmp_path,
    )
    with serve_in_thread(create_gateway_app(settings)) as url:
        before = scrape(url)
        assert httpx.post(f"{url}/auth/login", json={"username": "nobody", "password": "wrong password"}).status_code == 401
        malformed = httpx.post(f"{url}/auth/login", content=b"{not json", headers={"content-type": "application/json"})
        assert malformed.status_code == 400
        assert httpx.get(f"{url}/healthz").status_code == 200
        after = scrape(url)
    login = {"service": "gateway", "route": "/auth/login"}
    for status in ("401", "400"):
        assert moved(before, after, "cairn_http_requests_total", **login, status=status) == 1
        assert moved(before, after, "cairn_http_request_duration_seconds_count", **login, status=status) == 1
    assert moved(before, after, "cairn_http_requests_total", service="gateway", route="/healthz", status="200") == 1
    assert after.matching("cairn_outbox_events", service="gateway")  # reported from the start


@pytest.fixture
def names(amqp_url: str, unique: str) -> Iterator[dict[str, str]]:
    names = {"exchange": f"{unique}.events", "queue": f"{unique}.analytics"}
    yield names
    asyncio.run(delete_topology(amqp_url, **names))


def analytics_settings(tmp_path: Path, amqp_url: str, names: dict[str, str], **more) -> AnalyticsSettings:
    return AnalyticsSettings(
        service_token=TOKEN, data_dir=tmp_path, amqp_url=amqp_url,
        events_exchange=names["exchange"], analytics_queue=names["queue"], **more,
    )


async def publish_events(amqp_url: str, names: dict[str, str], count: int) -> None:
    """Fresh events through the services' own publisher, which stamps each message with its occurred_at."""
    publisher = RabbitEventPublisher(amqp_url=amqp_url, exchange=names["exchange"], queue=names["queue"])
    await publisher.start()
    for _ in range(count):
        publisher.submit(submitted(at=datetime.now(UTC), request_id=uuid.uuid4().hex))
    await publisher.close(timeout=10)
    assert publisher.published == count


def test_analytics_counts_consumed_and_dead_lettered_messages_and_reads_queue_depths(
    tmp_path: Path, amqp_url: str, names: dict[str, str]
) -> None:
    invalid = ("analytics.query.submitted", aio_pika.Message(body=b'{"event_type": "QuerySubmitted"}'))
    with serve_in_thread(create_analytics_app(analytics_settings(tmp_path, amqp_url, names))) as url:
        wait_until(lambda: httpx.get(f"{url}/readyz").status_code == 200, timeout=15, what="analytics to be ready")
        before = scrape(url)
        asyncio.run(publish_events(amqp_url, names, 1))
        asyncio.run(publish_raw(amqp_url, **names, messages=[invalid]))

        def settled() -> bool:
            return scrape(url).value("cairn_analytics_messages_total") - before.value("cairn_analytics_messages_total") >= 2

        wait_until(settled, timeout=15, what="both messages to be settled")
        # The depths are read from the broker every QUEUE_POLL_S: the dead letter shows within a poll or two.
        wait_until(
            lambda: scrape(url).value("cairn_analytics_queue_messages", queue="dead_letters") == 1,
            timeout=10, what="the dead-letter queue depth to read 1",
        )
        after = scrape(url)
    assert moved(before, after, "cairn_analytics_messages_total", outcome="ack") == 1
    assert moved(before, after, "cairn_analytics_messages_total", outcome="dead_letter") == 1
    assert moved(before, after, "cairn_analytics_dead_letters_total", reason="invalid_event") == 1
    assert after.value("cairn_analytics_queue_messages", queue="events") == 0
    assert 0 <= after.value("cairn_analytics_event_age_seconds") < 30  # stamped to the second on publishing


def test_analytics_reports_its_lag_while_the_database_is_down(tmp_path: Path, amqp_url: str, names: dict[str, str]) -> None:
    """With the database unreachable the consumer holds the batch it has (prefetch 2): the rest wait in the queue."""
    down = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/analytics"
    settings = analytics_settings(tmp_path, amqp_url, names, db_url=down, db_timeout_s=1, prefetch=2, batch_size=2)
    with serve_in_thread(create_analytics_app(settings)) as url:
        before = scrape(url)
        asyncio.run(publish_events(amqp_url, names, 5))
        wait_until(
            lambda: scrape(url).value("cairn_analytics_queue_messages", queue="events") == 3,
            timeout=15, what="the queue depth to read the 3 messages beyond the prefetch",
        )
        after = scrape(url)
    assert moved(before, after, "cairn_analytics_messages_total") == 0  # the held batch is not settled yet
