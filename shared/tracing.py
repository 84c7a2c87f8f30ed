"""OpenTelemetry traces: one TracerProvider per service, W3C `traceparent` in and out.

Spans are recorded and exported (OTLP over HTTP, in batches) only when an exporter is configured:
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set in the environment. Without
one nothing is recorded, but every request still gets trace and span ids that are propagated to the
services it calls and written into its log lines and events, for some 15-25 µs of CPU per request.

A service's spans come from the tracer of the service serving the request in hand (set by the request
middleware), so several Cairn apps served in one process (as in the tests) keep their spans apart.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import Span, SpanKind, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_propagator = TraceContextTextMapPropagator()
_tracers: dict[str, Tracer] = {}
_current_tracer: ContextVar[Tracer | None] = ContextVar("cairn_tracer", default=None)
_process_service: str | None = None  # the service configured last: in a deployed process, the only one


def otlp_endpoint_configured(environ: Mapping[str, str] = os.environ) -> bool:
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def configure_tracing(service: str, *, exporter: SpanExporter | None = None) -> TracerProvider:
    """Give `service` its TracerProvider (resource service.name=cairn-<service>) and return it.

    With `exporter`, or else with an OTLP endpoint in the environment, spans are sampled as
    OTEL_TRACES_SAMPLER says (default: follow the caller, record new traces) and exported in batches.
    With neither, no span is recorded (the ALWAYS_OFF sampler): ids only, for propagation and logs.
    """
    global _process_service
    if exporter is None and otlp_endpoint_configured():
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers and timeout from the OTEL_EXPORTER_OTLP_* variables
    resource = Resource.create({SERVICE_NAME: f"cairn-{service}"})
    provider = TracerProvider(resource=resource, sampler=None if exporter else ALWAYS_OFF)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _tracers[service] = provider.get_tracer("cairn")
    _process_service = service
    return provider


def tracer_for(service: str) -> Tracer:
    """The service's tracer; one that records nothing when tracing was never configured for it."""
    tracer = _tracers.get(service)
    if tracer is None:
        tracer = _tracers[service] = TracerProvider(
            resource=Resource.create({SERVICE_NAME: f"cairn-{service}"}), sampler=ALWAYS_OFF
        ).get_tracer("cairn")
    return tracer


def current_tracer() -> Tracer:
    """The tracer of the service serving the request in hand (else of this process's service)."""
    return _current_tracer.get() or tracer_for(_process_service or "unconfigured")


class _CurrentSpan:
    """A span made current for a block, ended at its end (an exception escaping it is recorded).

    A class rather than a generator context manager: it runs for every request and every hop, and with
    nothing recorded the generator layers of `start_as_current_span` cost more than the span itself."""

    __slots__ = ("_tracer", "_name", "_kind", "_parent", "_attributes", "_headers", "_span", "_tokens")

    def __init__(
        self, tracer: Tracer, name: str, *, kind: SpanKind, parent: otel_context.Context | None = None,
        attributes: Mapping[str, AttributeValue] | None = None, headers: dict[str, str] | None = None,
    ) -> None:
        self._tracer, self._name, self._kind, self._parent = tracer, name, kind, parent
        self._attributes, self._headers = attributes, headers

    def __enter__(self) -> Span:
        span = self._span = self._tracer.start_span(
            self._name, context=self._parent, kind=self._kind, attributes=self._attributes
        )
        self._tokens = (
            _current_tracer.set(self._tracer),
            otel_context.attach(trace.set_span_in_context(span, self._parent)),
        )
        if self._headers is not None:
            inject(self._headers)
        return span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        tracer_token, context_token = self._tokens
        if error is not None and self._span.is_recording():
            self._span.record_exception(error)
            self._span.set_status(StatusCode.ERROR, f"{type(error).__name__}: {error}")
        self._span.end()
        otel_context.detach(context_token)
        _current_tracer.reset(tracer_token)


def server_span(service: str, headers: Mapping[str, str], *, method: str) -> _CurrentSpan:
    """The SERVER span of one incoming request (`headers` with lower-case names), continuing the caller's
    trace from its `traceparent`. Named by the method until `finish_server_span` knows the route."""
    parent = _propagator.extract(headers) if "traceparent" in headers else None
    return _CurrentSpan(
        tracer_for(service), method, kind=SpanKind.SERVER, parent=parent, attributes={"http.request.method": method}
    )


def finish_server_span(span: Span, *, method: str, route: str | None, status: int, request_id: str) -> None:
    if not span.is_recording():
        return
    if route:
        span.update_name(f"{method} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    span.set_attribute("cairn.request_id", request_id)
    if status >= 500:
        span.set_status(StatusCode.ERROR)


def client_span(
    name: str, headers: dict[str, str] | None = None, attributes: Mapping[str, AttributeValue] | None = None
) -> _CurrentSpan:
    """A CLIENT span around one outgoing call, e.g. `with client_span("retrieval POST /search", headers):`.

    The span's `traceparent` replaces the one in `headers` (built by shared.web.internal_headers), so the
    service called continues this span. Use one per attempt: a retry is a new span."""
    return _CurrentSpan(current_tracer(), name, kind=SpanKind.CLIENT, attributes=attributes, headers=headers)


def start_span(
    name: str, *, kind: SpanKind = SpanKind.INTERNAL, attributes: Mapping[str, AttributeValue] | None = None
) -> Span:
    """A child of the current span that is not made current: for work spread over the yields of a
    generator, where a current span would leak into the consumer's code. The caller must end() it."""
    return current_tracer().start_span(name, kind=kind, attributes=attributes)


def inject(headers: dict[str, str], *, span: Span | None = None) -> None:
    """Write the `traceparent` (and `tracestate`) of `span`, by default the current span, into `headers`;
    nothing outside a trace."""
    _propagator.inject(headers, context=trace.set_span_in_context(span) if span is not None else None)


@contextmanager
def continued_trace(traceparent: str | None) -> Iterator[None]:
    """Make the span named by `traceparent` (from a message, say) the current parent within the block."""
    token = otel_context.attach(_propagator.extract({"traceparent": traceparent} if traceparent else {}))
    try:
        yield
    finally:
        otel_context.detach(token)
