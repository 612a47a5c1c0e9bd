"""OpenTelemetry tracing (the `otel` extra): a server span per request, child spans for the
claim, the upstream call, the record and the replay, and W3C trace context in and out.

Imported only when `tracing.enabled`: with tracing off none of this runs, the clients are the
plain ones and the request path holds no-op spans (`http.flow.context.Spans`). Where the spans
come from:
- the server span: `Tracing.serve` wraps the gateway's request handler;
- the claim and the record: `http.flow.traced.TracedSpans` (around the store's `claim` and
  `complete` calls, where the request path makes them);
- the upstream call: `http.flow.traced.TracedUpstreams`, which also writes the `traceparent` the
  upstream receives (the client span's, so the upstream's own span is its child);
- the replay: `Services.spans.step` around `http.answers.replay.replay`.

Spans carry the key's digest (the one in the record's Redis key), never the key, the tenant's
identity or any header value.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, MutableMapping
from contextlib import AbstractContextManager
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.config.settings import TracingSettings
from gateway.telemetry.requestlog import current

# Span names of the steps inside a request (the server and client spans are named by method).
CLAIM: Final = "idempotency.claim"
RECORD: Final = "idempotency.record"
# Also http.flow.handler.REPLAY_SPAN, which runs without the extra.
REPLAY: Final = "idempotency.replay"

# Attributes beyond the HTTP semantic conventions.
ROUTE: Final = "idempotency.route"
OUTCOME: Final = "idempotency.outcome"  # forwarded, replayed, conflict, mismatch, rejected, ...
KEY_DIGEST: Final = "idempotency.key_digest"
CLAIM_RESULT: Final = "idempotency.claim.result"  # CLAIMED, IN_FLIGHT, MISMATCH, DONE
STORED: Final = "idempotency.stored"  # false: fenced off by a newer claim
ERROR_TYPE: Final = "error.type"
STATUS_CODE: Final = "http.response.status_code"
CLIENT_CLOSED: Final = 499  # the access log's status for a client that hung up first (nginx's)

# Methods the semantic conventions name; any other is reported as _OTHER.
KNOWN_METHODS: Final = frozenset(
    ("CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")
)
_REDIS: Final = {"db.system.name": "redis", "db.operation.name": "EVALSHA"}


class Tracing:
    """The gateway's tracer: its own provider (never the process-wide one), a sampler that
    follows the caller's decision, and the W3C trace-context propagator."""

    def __init__(self, config: TracingSettings, exporter: SpanExporter | None = None) -> None:
        self.provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name}),
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
        )
        exporter = exporter or OTLPSpanExporter(
            endpoint=config.endpoint, headers=config.headers or None, timeout=config.timeout
        )
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("idem-gateway")
        self.propagator = TraceContextTextMapPropagator()

    def serve(self, handle: Handler) -> Handler:
        """`handle` inside a server span that continues the caller's trace, if any."""

        async def traced(request: web.Request) -> web.StreamResponse:
            caller = self.propagator.extract(request.headers)
            status = 500
            with self.tracer.start_as_current_span(
                _span_method(request.method),
                context=caller,
                kind=SpanKind.SERVER,
                record_exception=False,  # an exception's text is not checked for secrets
                set_status_on_exception=False,
            ) as span:
                if span.is_recording():  # a trace not sampled skips the attributes' cost
                    span.set_attributes(_server_attributes(request))
                try:
                    response = await handle(request)
                    status = response.status
                    return response
                except web.HTTPException as http:
                    status = http.status
                    raise
                except asyncio.CancelledError:
                    status = CLIENT_CLOSED  # the client went away (a forward still finishes)
                    raise
                except BaseException as error:
                    span.set_attribute(ERROR_TYPE, type(error).__qualname__)
                    raise
                finally:
                    if span.is_recording():
                        _finish_server(span, request.method, status)

        return traced

    def span(self, name: str) -> AbstractContextManager[Span]:
        """A step of the request, as a child of the current span."""
        return self._step(name, SpanKind.INTERNAL, None)

    def redis(self, name: str) -> AbstractContextManager[Span]:
        """A Redis call (a claim or a completion) as a client span."""
        return self._step(name, SpanKind.CLIENT, _REDIS)

    def upstream(self, method: str, origin: str, target: str) -> Span:
        """The client span of an upstream call, started and not made current (the caller
        ends it once the answer's body is read). In a trace not sampled: the current span,
        which records nothing and whose context the upstream still receives."""
        parent = trace.get_current_span()
        if not parent.is_recording():
            return parent
        return self.tracer.start_span(
            _span_method(method),
            kind=SpanKind.CLIENT,
            attributes=_client_attributes(method, origin, target),
            record_exception=False,
            set_status_on_exception=False,
        )

    def inject(self, headers: MutableMapping[str, str], span: Span) -> None:
        """Write `span`'s trace context (traceparent, tracestate) into `headers`."""
        self.propagator.inject(headers, context=trace.set_span_in_context(span))

    @contextlib.contextmanager
    def _step(self, name: str, kind: SpanKind, attributes: dict[str, str] | None) -> Iterator[Span]:
        parent = trace.get_current_span()
        if not parent.is_recording():  # not sampled: a child would not be kept either
            yield parent
            return
        with self.tracer.start_as_current_span(
            name,
            kind=kind,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                failed(span, exc)
                raise

    def close(self) -> None:
        """Export the spans still queued, then stop the exporter."""
        self.provider.shutdown()


def failed(span: Span, exc: BaseException) -> None:
    """Mark `span` failed with the exception's type only: its message may name internals."""
    span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


def _span_method(method: str) -> str:
    return method if method in KNOWN_METHODS else "HTTP"


def _method_attributes(method: str) -> dict[str, Any]:
    if method in KNOWN_METHODS:
        return {"http.request.method": method}
    return {"http.request.method": "_OTHER", "http.request.method_original": method}


def _server_attributes(request: web.Request) -> dict[str, Any]:
    attributes = _method_attributes(request.method)
    attributes["url.path"] = request.path  # the query is left out: it may carry secrets
    attributes["url.scheme"] = request.scheme
    attributes["network.protocol.version"] = f"{request.version.major}.{request.version.minor}"
    host, _, port = (request.host or "").rpartition(":")
    if host and port.isdigit():
        attributes["server.address"], attributes["server.port"] = host, int(port)
    elif request.host:
        attributes["server.address"] = request.host
    if request.remote:
        attributes["client.address"] = request.remote
    agent = request.headers.get("User-Agent")
    if agent:
        attributes["user_agent.original"] = agent
    return attributes


def _client_attributes(method: str, origin: str, target: str) -> dict[str, Any]:
    parts = urlsplit(origin)
    attributes = _method_attributes(method)
    path = target.split("?", 1)[0]  # the query is left out: it may carry secrets
    attributes["url.full"] = origin + path
    attributes["server.address"] = parts.hostname or ""
    attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
    attributes["network.protocol.version"] = "1.1"
    return attributes


def _finish_server(span: Span, method: str, status: int) -> None:
    """What the request turned out to be: its status, route, outcome and key digest."""
    span.set_attribute(STATUS_CODE, status)
    if status >= 500:
        span.set_attribute(ERROR_TYPE, str(status))
        span.set_status(Status(StatusCode.ERROR))
    info = current()
    if info is None:
        return
    if info.route:
        span.set_attribute(ROUTE, info.route)
    if info.route and info.route != "-":  # "-": no route matched
        # The route's name, not its path: as low in cardinality as the convention's http.route.
        span.update_name(f"{_span_method(method)} {info.route}")
    if info.outcome:
        span.set_attribute(OUTCOME, info.outcome)
    if info.key_hash:
        span.set_attribute(KEY_DIGEST, info.key_hash)
