"""One question through the gateway, chat and retrieval, each a real app served over HTTP on its own port:
one trace whose spans come from all three services, linked gateway -> chat -> retrieval with the LLM call,
events that carry its traceparent, and one JSON log line per service for the request, without the token."""
from __future__ import annotations

import asyncio
import io
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, format_span_id, format_trace_id

from services.chat.main import create_app as create_chat
from services.chat.settings import Settings as ChatSettings
from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.main import create_app as create_gateway
from services.gateway.settings import Settings as GatewaySettings
from services.gateway.users import add_user
from services.retrieval.adapters.embedder import SentenceTransformerEmbedder
from services.retrieval.main import create_app as create_retrieval
from services.retrieval.settings import Settings as RetrievalSettings
from shared.events import FeedbackReceived, QuerySubmitted, ResponseGenerated
from shared.logging import json_handler
from shared.tracing import configure_tracing
from tests.support import read_events, serve_in_thread, wait_until

pytestmark = pytest.mark.integration

SERVICE_TOKEN = "tracing-test-service-token"
PASSWORD = "correct horse battery"
TRACED = ("gateway", "chat", "retrieval", "offline-llm")  # offline-llm: chat's in-process generator endpoint
USERS_DOC = "# Users\n\n## Adding a user\n\nAn administrator adds a user with `cairn user add NAME --role user`."


@dataclass
class Stack:
    gateway_url: str
    chat_url: str
    amqp_url: str
    name: str
    exporter: InMemorySpanExporter
    providers: list[TracerProvider]
    logs: io.StringIO

    def spans(self) -> list[ReadableSpan]:
        for provider in self.providers:
            provider.force_flush()
        return list(self.exporter.get_finished_spans())


async def _seed_user(redis_url: str, prefix: str) -> None:
    redis = connect(redis_url, timeout_s=2)
    users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
    await add_user(users=users, username="ada", password=PASSWORD, roles=["user"])
    await redis.aclose()


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, amqp_url: str, embedder: SentenceTransformerEmbedder
) -> Iterator[Stack]:
    name = f"test-{uuid.uuid4().hex[:10]}"
    data = tmp_path_factory.mktemp("tracing")
    exporter = InMemorySpanExporter()
    providers = [configure_tracing(service, exporter=exporter) for service in TRACED]
    logs = io.StringIO()
    handler = json_handler("test", logs)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # setLevel, not assignment: loggers cache whether a level is enabled
    root.addHandler(handler)
    asyncio.run(_seed_user(redis_url, name))
    events = {"amqp_url": amqp_url, "events_exchange": f"{name}.events", "analytics_queue": f"{name}.analytics"}
    retrieval = create_retrieval(
        RetrievalSettings(service_token=SERVICE_TOKEN, data_dir=data / "retrieval", chroma_collection=name),
        embedder=embedder,
    )
    try:
        with serve_in_thread(retrieval) as retrieval_url:
            added = httpx.post(
                f"{retrieval_url}/documents", json={"text": USERS_DOC, "source": "users.md"},
                headers={"X-Service-Token": SERVICE_TOKEN}, timeout=30,
            )
            assert added.status_code == 200, added.text
            chat = create_chat(
                ChatSettings(
                    service_token=SERVICE_TOKEN, retrieval_url=retrieval_url, redis_url=redis_url, redis_prefix=name,
                    data_dir=data / "chat", **events,
                )
            )
            with serve_in_thread(chat) as chat_url:
                gateway = create_gateway(
                    GatewaySettings(
                        service_token=SERVICE_TOKEN, redis_url=redis_url, redis_prefix=name, chat_url=chat_url,
                        retrieval_url=retrieval_url, data_dir=data / "gateway", **events,
                    )
                )
                with serve_in_thread(gateway) as gateway_url:
                    yield Stack(gateway_url, chat_url, amqp_url, name, exporter, providers, logs)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for service, provider in zip(TRACED, providers):
            provider.shutdown()
            configure_tracing(service)  # back to recording nothing


def _login(stack: Stack) -> tuple[str, str]:
    response = httpx.post(f"{stack.gateway_url}/auth/login", json={"username": "ada", "password": PASSWORD}, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()["token"], response.json()["user"]["id"]


def _ask(stack: Stack, token: str, request_id: str) -> httpx.Response:
    response = httpx.post(
        f"{stack.gateway_url}/api/chat", json={"query": "How do I add a user?"},
        headers={"Authorization": f"Bearer {token}", "X-Request-ID": request_id}, timeout=60,
    )
    assert response.status_code == 200, response.text
    assert "cairn user add" in response.json()["answer"]
    return response


def _service(span: ReadableSpan) -> str:
    return str(span.resource.attributes["service.name"])


def _trace_and_span(traceparent: str | None) -> tuple[str, str]:
    """The trace id and span id a traceparent names, checking that it says "sampled"."""
    version, trace_id, span_id, flags = (traceparent or "").split("-")
    assert version == "00" and int(flags, 16) & 1, traceparent
    return trace_id, span_id


def _by_request(stack: Stack, request_id: str) -> ReadableSpan:
    """The gateway's SERVER span of the request, once every span of the request has ended."""
    def gateway_span() -> ReadableSpan | None:
        return next(
            (s for s in stack.spans() if s.kind is SpanKind.SERVER and s.attributes.get("cairn.request_id") == request_id
             and _service(s) == "cairn-gateway"),
            None,
        )

    wait_until(lambda: gateway_span() is not None, timeout=10, interval=0.1, what="the gateway's span")
    return gateway_span()


def test_a_question_is_one_trace_across_gateway_chat_and_retrieval_and_its_events_carry_it(stack: Stack) -> None:
    token, _ = _login(stack)
    request_id = f"{stack.name}-ask"
    _ask(stack, token, request_id)

    root = _by_request(stack, request_id)
    trace_id = root.context.trace_id
    spans = [s for s in stack.spans() if s.context.trace_id == trace_id]
    by_id = {s.context.span_id: s for s in spans}
    assert {_service(s) for s in spans} == {f"cairn-{service}" for service in TRACED}

    def parent(span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None and span.parent.span_id in by_id, f"{span.name} has no recorded parent"
        return by_id[span.parent.span_id]

    def one(service: str, kind: SpanKind, name: str) -> ReadableSpan:
        found = [s for s in spans if _service(s) == f"cairn-{service}" and s.kind is kind and s.name == name]
        assert len(found) == 1, (service, kind, name, [(_service(s), s.kind, s.name) for s in spans])
        return found[0]

    assert root.name == "POST /api/chat" and root.parent is None
    assert root.attributes["http.response.status_code"] == 200

    chat_server = one("chat", SpanKind.SERVER, "POST /chat")
    gateway_hop = parent(chat_server)
    assert (_service(gateway_hop), gateway_hop.kind, parent(gateway_hop)) == ("cairn-gateway", SpanKind.CLIENT, root)

    retrieval_server = one("retrieval", SpanKind.SERVER, "POST /search")
    chat_hop = parent(retrieval_server)
    assert (_service(chat_hop), chat_hop.kind, parent(chat_hop)) == ("cairn-chat", SpanKind.CLIENT, chat_server)
    assert retrieval_server.attributes["cairn.request_id"] == request_id

    llm = next(s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat")
    assert (_service(llm), llm.kind, parent(llm)) == ("cairn-chat", SpanKind.CLIENT, chat_server)
    assert llm.attributes["gen_ai.usage.input_tokens"] > 0 and llm.attributes["gen_ai.usage.output_tokens"] > 0
    llm_endpoint = one("offline-llm", SpanKind.SERVER, "POST /v1/chat/completions")
    assert parent(llm_endpoint) is llm  # the LLM endpoint continues the trace it was sent

    received = asyncio.run(read_events(stack.amqp_url, stack.name, 2))
    events = [event for _, event in received]
    assert [type(e) for e in events] == [QuerySubmitted, ResponseGenerated]
    chat_span = (format_trace_id(trace_id), format_span_id(chat_server.context.span_id))
    assert {(e.request_id, e.trace_id, _trace_and_span(e.traceparent)) for e in events} == {
        (request_id, format_trace_id(trace_id), chat_span)
    }

    rated = httpx.post(
        f"{stack.gateway_url}/api/feedback", json={"request_id": request_id, "rating": 1},
        headers={"Authorization": f"Bearer {token}", "X-Request-ID": f"{stack.name}-rate"}, timeout=10,
    )
    assert rated.status_code < 300, rated.text
    [(_, feedback)] = asyncio.run(read_events(stack.amqp_url, stack.name, 1))
    rate_span = _by_request(stack, f"{stack.name}-rate")
    assert isinstance(feedback, FeedbackReceived) and feedback.data.rated_request_id == request_id
    assert _trace_and_span(feedback.traceparent) == (
        format_trace_id(rate_span.context.trace_id), format_span_id(rate_span.context.span_id)
    )


def test_each_service_logs_one_json_line_per_request_with_its_user_and_never_the_token(stack: Stack) -> None:
    token, user_id = _login(stack)
    request_id = f"{stack.name}-logged"
    _ask(stack, token, request_id)
    trace_id = format_trace_id(_by_request(stack, request_id).context.trace_id)

    lines = [json.loads(line) for line in stack.logs.getvalue().splitlines()]
    requests = [line for line in lines if line["message"] == "request" and line["request_id"] == request_id]
    assert sorted(line["service"] for line in requests) == ["chat", "gateway", "retrieval"]
    routes = {line["service"]: line["route"] for line in requests}
    assert routes == {"gateway": "/api/chat", "chat": "/chat", "retrieval": "/search"}
    for line in requests:
        assert (line["trace_id"], line["user_id"], line["status"], line["method"]) == (trace_id, user_id, 200, "POST")
        assert line["level"] == "INFO" and line["latency_ms"] > 0
    assert token not in stack.logs.getvalue() and SERVICE_TOKEN not in stack.logs.getvalue()


def test_an_unexpected_error_is_logged_with_its_request_id_trace_and_traceback(stack: Stack, redis_url: str) -> None:
    token, user_id = _login(stack)
    conversation_id = _ask(stack, token, f"{stack.name}-first").json()["conversation_id"]
    # A turn that is not JSON: reading the conversation back fails in a way no handler names.
    with redis.Redis.from_url(redis_url) as client:
        client.rpush(f"{stack.name}:conversation:{conversation_id}:turns", "not json")
    request_id = f"{stack.name}-crash"
    response = httpx.post(
        f"{stack.chat_url}/chat", json={"query": "And then?", "conversation_id": conversation_id},
        headers={"X-Service-Token": SERVICE_TOKEN, "X-User-Id": user_id, "X-User-Roles": "user", "X-Request-ID": request_id},
        timeout=30,
    )
    assert response.status_code == 500 and response.json()["error"] == "internal_error"
    assert response.headers["X-Request-ID"] == request_id  # what a user reporting the failure can quote

    def chat_span() -> ReadableSpan | None:
        return next(
            (s for s in stack.spans() if s.attributes.get("cairn.request_id") == request_id and _service(s) == "cairn-chat"
             and s.kind is SpanKind.SERVER),
            None,
        )

    wait_until(lambda: chat_span() is not None, timeout=10, interval=0.1, what="chat's span")
    span = chat_span()
    assert span.status.status_code is StatusCode.ERROR and [e.name for e in span.events] == ["exception"]
    lines = [json.loads(line) for line in stack.logs.getvalue().splitlines()]
    [error] = [line for line in lines if line["level"] == "ERROR" and line["request_id"] == request_id]
    assert error["message"] == "unhandled error"
    assert error["trace_id"] == format_trace_id(span.context.trace_id) and "JSONDecodeError" in error["exc_info"]
    [line] = [line for line in lines if line["message"] == "request" and line["request_id"] == request_id]
    assert (line["status"], line["user_id"]) == (500, user_id)
