"""The `route` a request is counted, logged and traced under: the route's template as the guide writes it,
`/documents/{doc_id}`, whatever converter the route's path declares, and the API pages' own assets under their
mount's template rather than as "unmatched"."""
from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import REGISTRY

from shared.tracing import configure_tracing
from shared.web import DOCS_ASSETS, create_service_app
from tests.unit.shared.json_logs import json_lines_of

pytestmark = pytest.mark.unit

SERVICE = "unit-routes"


@pytest.fixture(scope="module")
def tracing() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = configure_tracing(SERVICE, exporter=exporter)
    try:
        yield provider, exporter
    finally:
        provider.shutdown()
        configure_tracing(SERVICE)


@pytest.fixture(scope="module")
def client(tracing: tuple[TracerProvider, InMemorySpanExporter]) -> Iterator[TestClient]:
    app = create_service_app(service=SERVICE, title="t")
    documents = APIRouter(prefix="/api")

    @documents.get("/documents/{doc_id:path}")
    async def document(doc_id: str) -> dict:
        return {"doc_id": doc_id}

    app.include_router(documents)
    with TestClient(app) as client:
        yield client


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    with json_lines_of(SERVICE) as written:
        yield written


def _counted(route: str, status: str = "200") -> float:
    labels = {"service": SERVICE, "method": "GET", "route": route, "status": status}
    return REGISTRY.get_sample_value("cairn_http_requests_total", labels) or 0.0


def _request_line(logs: io.StringIO, request_id: str) -> dict:
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    line, = (x for x in lines if x["message"] == "request" and x["request_id"] == request_id)
    return line


def test_a_route_with_a_path_converter_is_counted_logged_and_traced_under_its_template(
    client: TestClient, logs: io.StringIO, tracing: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    before = _counted("/api/documents/{doc_id}")
    response = client.get("/api/documents/guides/setup.md", headers={"X-Request-ID": "converter-route"})
    assert response.status_code == 200
    assert _counted("/api/documents/{doc_id}") - before == 1
    assert _counted("/api/documents/{doc_id:path}") == 0
    assert _request_line(logs, "converter-route")["route"] == "/api/documents/{doc_id}"
    provider, spans = tracing
    provider.force_flush()
    server, = (s for s in spans.get_finished_spans()
               if s.kind is SpanKind.SERVER and s.attributes["cairn.request_id"] == "converter-route")
    assert (server.name, server.attributes["http.route"]) == ("GET /api/documents/{doc_id}", "/api/documents/{doc_id}")


def test_an_asset_of_the_api_pages_is_counted_under_its_mount_not_as_unmatched(
    client: TestClient, logs: io.StringIO
) -> None:
    route = f"{DOCS_ASSETS}/{{path}}"
    before, unmatched_before = _counted(route), _counted("unmatched")
    response = client.get(f"{DOCS_ASSETS}/swagger-ui.css", headers={"X-Request-ID": "docs-asset"})
    assert response.status_code == 200
    assert _counted(route) - before == 1
    assert _counted("unmatched") == unmatched_before
    assert _request_line(logs, "docs-asset")["route"] == route


def test_a_path_no_route_serves_is_still_unmatched(client: TestClient, logs: io.StringIO) -> None:
    before = _counted("unmatched", "404")
    assert client.get("/nowhere/at-all", headers={"X-Request-ID": "no-route"}).status_code == 404
    assert _counted("unmatched", "404") - before == 1
    assert _request_line(logs, "no-route")["route"] == "unmatched"
