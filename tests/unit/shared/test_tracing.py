"""Tracing off by default (ids made and propagated, nothing recorded or exported), OTLP/HTTP when configured."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from fastapi import Request
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind

from shared.context import current_trace_id, current_traceparent
from shared.settings import CommonSettings
from shared.tracing import client_span, configure_tracing, continued_trace, tracer_for
from shared.web import create_service_app, internal_headers

pytestmark = pytest.mark.unit

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{TRACE}-00f067aa0ba902b7-01"


def _processors(provider) -> tuple:
    return provider._active_span_processor._span_processors  # the SDK offers no public list


@pytest.fixture
def no_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)


def test_without_an_endpoint_no_exporter_is_installed_and_nothing_is_recorded(no_endpoint) -> None:
    provider = configure_tracing("unit-off")
    assert _processors(provider) == () and provider.sampler is ALWAYS_OFF
    assert provider.resource.attributes["service.name"] == "cairn-unit-off"
    with tracer_for("unit-off").start_as_current_span("work") as span:
        assert not span.is_recording()
        assert current_trace_id() is not None  # ids are still made, for logs, events and the services called
        assert int(current_traceparent()[-2:], 16) & 1 == 0  # and say "not sampled" downstream
    assert current_trace_id() is None


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A loopback OTLP/HTTP receiver recording each request's path, content type and body."""
    received: list[tuple[str, str, bytes]] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()


def test_an_otlp_endpoint_exports_spans_over_http_in_batches(monkeypatch: pytest.MonkeyPatch, otlp_receiver) -> None:
    url, received = otlp_receiver
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    provider = configure_tracing("unit-otlp")
    try:
        [processor] = _processors(provider)
        assert isinstance(processor, BatchSpanProcessor)
        with tracer_for("unit-otlp").start_as_current_span("work"):
            pass
        assert received == []  # batched, not sent span by span
        assert provider.force_flush()
    finally:
        provider.shutdown()
        monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
        configure_tracing("unit-otlp")  # back to recording nothing
    [(path, content_type, body)] = received
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request = ExportTraceServiceRequest.FromString(body)
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    assert service == "cairn-unit-otlp"
    assert [s.name for s in resource_spans.scope_spans[0].spans] == ["work"]


def _app_echoing_internal_headers():
    app = create_service_app(service="unit-web", title="t")

    @app.get("/hop")
    async def hop(request: Request) -> dict:
        with client_span("next POST /x", headers := internal_headers(CommonSettings())):
            pass
        return {"plain": internal_headers(CommonSettings())["traceparent"], "hop": headers["traceparent"]}

    return app


def test_the_middleware_continues_the_callers_trace_and_passes_it_on(no_endpoint) -> None:
    configure_tracing("unit-web")
    with TestClient(_app_echoing_internal_headers()) as client:
        continued = client.get("/hop", headers={"traceparent": INCOMING}).json()
        fresh = client.get("/hop").json()
    plain, hop = continued["plain"].split("-"), continued["hop"].split("-")
    assert plain[1] == hop[1] == TRACE  # one trace
    assert len({plain[2], hop[2], "00f067aa0ba902b7"}) == 3  # the server span and the client span are new spans
    assert fresh["plain"].split("-")[1] not in (TRACE, "0" * 32)


def test_recorded_spans_link_server_and_client_and_name_the_route() -> None:
    exporter = InMemorySpanExporter()
    provider = configure_tracing("unit-rec", exporter=exporter)
    app = create_service_app(service="unit-rec", title="t")

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict:
        with client_span("store GET", internal_headers(CommonSettings())):
            return {"id": item_id}

    try:
        with TestClient(app) as client:
            assert client.get("/items/7", headers={"traceparent": INCOMING, "X-Request-ID": "rid-7"}).status_code == 200
        provider.force_flush()
        server, = (s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER)
        hop, = (s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT)
    finally:
        provider.shutdown()
        configure_tracing("unit-rec")
    assert server.name == "GET /items/{item_id}" and server.parent.span_id == int("00f067aa0ba902b7", 16)
    assert server.attributes["http.response.status_code"] == 200 and server.attributes["cairn.request_id"] == "rid-7"
    assert hop.parent.span_id == server.context.span_id and hop.context.trace_id == int(TRACE, 16)


def test_a_traceparent_from_a_message_becomes_the_current_parent() -> None:
    with continued_trace(INCOMING):
        assert (current_trace_id(), current_traceparent()) == (TRACE, INCOMING)
    with continued_trace(None):
        assert current_trace_id() is None
