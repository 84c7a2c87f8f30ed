"""Schemathesis against each service's OpenAPI, with every check on: no 5xx, no undocumented status
and no response that breaks its schema. Real services over HTTP; a bounded number of examples."""
from __future__ import annotations

import asyncio
import html
import json
import uuid
from collections.abc import Iterator

import aio_pika
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import negative_data_rejection

from services.analytics.adapters.sql_store import SqlEventStore
from services.analytics.domain import to_record
from services.analytics.main import create_app as create_analytics_app
from services.analytics.settings import Settings as AnalyticsSettings
from services.chat.main import create_app as create_chat_app
from services.chat.settings import Settings as ChatSettings
from services.retrieval.main import create_app as create_retrieval_app
from services.retrieval.settings import Settings as RetrievalSettings
from shared.broker import dead_letter_names
from shared.filters import INT64_MAX, INT64_MIN
from tests.support import serve_in_thread
from tests.unit.analytics.analytics_events import responded, submitted
from tests.unit.chat.fakes import FakeRetriever, ListPublisher

pytestmark = pytest.mark.integration

TOKEN = "contract-token"
INTERNAL = {"X-Service-Token": TOKEN, "X-User-Id": "contract-user", "X-User-Roles": "user", "X-Session-Id": "s1"}
EXAMPLES = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def chat_settings() -> ChatSettings:
    return ChatSettings(service_token=TOKEN, redis_prefix=f"contracts-{uuid.uuid4().hex}")


@pytest.fixture(scope="module")
def chat_url(redis_url) -> Iterator[str]:
    settings_ = chat_settings().model_copy(update={"redis_url": redis_url})
    with serve_in_thread(create_chat_app(settings_, publisher=ListPublisher(), retriever=FakeRetriever())) as url:
        yield url


# The schema is read from the app itself; the calls go to the served app over HTTP.
chat = schemathesis.openapi.from_dict(create_chat_app(chat_settings()).openapi())


@chat.parametrize()
@EXAMPLES
def test_chat_keeps_its_contract(case, chat_url):
    case.call_and_validate(base_url=chat_url, headers=INTERNAL)


def retrieval_settings(data_dir) -> RetrievalSettings:
    return RetrievalSettings(service_token=TOKEN, data_dir=data_dir, chroma_collection="contracts")


DOCUMENTS = [
    {"doc_id": "guides/backups.md", "text": "# Backups\n\nBackups run nightly.", "category": "ops"},
    {"doc_id": "billing", "text": "Invoices are sent monthly to the billing contact.", "source": "billing.txt"},
]


@pytest.fixture(scope="module")
def retrieval_url(tmp_path_factory, embedder) -> Iterator[str]:
    """The real embedding model and embedded Chroma, holding a few documents for search and the document routes."""
    app = create_retrieval_app(retrieval_settings(tmp_path_factory.mktemp("contracts")), embedder=embedder)
    with serve_in_thread(app) as url:
        for document in DOCUMENTS:
            httpx.post(f"{url}/documents", json=document, headers=INTERNAL, timeout=30).raise_for_status()
        yield url


# What a file of each text type named by the upload's `encoding` holds: a file's integrity is beyond what
# OpenAPI can say, and schemathesis would otherwise send an image's bytes under any of these types. Text:
# UTF-8, not blank, no NUL, no BOM (a file holding only one is empty). PDF is left out: writing one with
# text in it takes a PDF writer.
_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00\ufeff"), min_size=1, max_size=200)
_TEXT = _TEXT.filter(str.strip)
schemathesis.openapi.media_type("text/plain", _TEXT.map(str.encode))
schemathesis.openapi.media_type("text/markdown", _TEXT.map(lambda text: f"# Notes\n\n{text}".encode()))
schemathesis.openapi.media_type("text/html", _TEXT.map(lambda text: f"<h1>Notes</h1><p>{html.escape(text)}</p>".encode()))

retrieval = schemathesis.openapi.from_dict(create_retrieval_app(retrieval_settings("unused")).openapi())


def _beyond_64_bits(value) -> bool:
    """Whether `value` holds a whole number outside 64 bits, also inside a multipart form's JSON field."""
    if isinstance(value, str) and value.startswith("{"):  # a multipart form's JSON field (metadata)
        try:
            value = json.loads(value)
        except ValueError:
            return False
    if isinstance(value, dict):
        return any(_beyond_64_bits(item) for item in value.values())
    if isinstance(value, list):
        return any(_beyond_64_bits(item) for item in value)
    if isinstance(value, float):  # JSON Schema calls 1e300 an integer, Python (and the service) a float
        return value.is_integer() and not INT64_MIN <= value <= INT64_MAX
    return isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX


@retrieval.parametrize()
@EXAMPLES
def test_retrieval_keeps_its_contract(case, retrieval_url):
    # schemathesis's generator reaches past integer bounds above 2**53 through float rounding (9223372036854776000
    # for a maximum of 2**63 - 1, about 3 bodies in 1,000 here) and sends them as valid: such a draw is not one.
    # Nor is an "invalid" one holding a whole float beyond them (-1.8e308), which JSON Schema counts an integer
    # out of bounds and the service reads as the float it is.
    assume(not _beyond_64_bits(case.body))
    # A form field carries only text: schemathesis's "invalid" multipart bodies (a null doc_id, a number where
    # metadata's anyOf also allows one) reach the service as valid text, so their acceptance says nothing.
    # Multipart bodies are still checked for everything else, and invalid JSON bodies must still be refused.
    multipart = case.media_type == "multipart/form-data"
    case.call_and_validate(
        base_url=retrieval_url, headers=INTERNAL, excluded_checks=[negative_data_rejection] if multipart else None
    )


def analytics_settings(data_dir, amqp_url: str, unique: str, retrieval_url: str = "http://unused") -> AnalyticsSettings:
    return AnalyticsSettings(
        service_token=TOKEN,
        data_dir=data_dir,
        amqp_url=amqp_url,
        retrieval_url=retrieval_url,
        events_exchange=f"{unique}.events",
        analytics_queue=f"{unique}.analytics",
    )


async def _delete_topology(amqp_url: str, settings_: AnalyticsSettings) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        dead_exchange, dead_queue = dead_letter_names(settings_.analytics_queue)
        for queue in (settings_.analytics_queue, dead_queue):
            await channel.queue_delete(queue)
        for exchange in (settings_.events_exchange, dead_exchange):
            await channel.exchange_delete(exchange)


@pytest.fixture(scope="module")
def analytics_url(tmp_path_factory, amqp_url, retrieval_url) -> Iterator[str]:
    """SQLite in a temporary directory holding a few events; the consumer on the real RabbitMQ, under unique
    names; the real retrieval service above for the documents no answer cites."""
    settings_ = analytics_settings(
        tmp_path_factory.mktemp("analytics"), amqp_url, f"contracts-{uuid.uuid4().hex[:10]}", retrieval_url
    )
    store = SqlEventStore.from_url(settings_.database_url)
    store.create_schema()
    for event in (submitted(request_id="c1"), responded(request_id="c1", total_ms=250.0, citations=3)):
        store.add(to_record(event))
    store.close()
    try:
        with serve_in_thread(create_analytics_app(settings_)) as url:
            yield url
    finally:
        asyncio.run(_delete_topology(amqp_url, settings_))


# `from` must not be after `to`, and a time series has at most 10,000 buckets: rules between parameters, which
# OpenAPI cannot state, so schema-valid values can break them and get their documented 422. For the analytics
# reports 422 joins the statuses that count as accepting schema-valid data (schemathesis's defaults otherwise);
# every other check stays as it is.
REVERSED_RANGE_IS_422 = SchemathesisConfig.from_dict(
    {
        "operations": [
            {
                "include-path-regex": "^/analytics/",
                "include-method": "GET",
                "checks": {
                    "positive_data_acceptance": {
                        "expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx", "422"]
                    }
                },
            }
        ]
    }
)
analytics_schema = create_analytics_app(analytics_settings("unused", "amqp://unused", "unused")).openapi()
analytics = schemathesis.openapi.from_dict(analytics_schema, config=REVERSED_RANGE_IS_422)


@analytics.parametrize()
@EXAMPLES
def test_analytics_keeps_its_contract(case, analytics_url):
    case.call_and_validate(base_url=analytics_url, headers=INTERNAL)
