"""OpenTelemetry tracing through a real request flow: a real gateway app, the real redis-server
and a real upstream that records the `traceparent` it received; spans kept by the SDK's
in-memory exporter (or sent by OTLP to a real receiver on loopback)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.core.keys import digest
from gateway.errors import ConfigError
from gateway.http.app import SERVICES, create_app
from gateway.http.flow.traced import TracedSpans, TracedUpstreams
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.tracing import CLAIM, RECORD, REPLAY, Tracing
from testkit.ports import Port

from .upstream import CountingUpstream

KEY = "order-7f3a-the-raw-key"
SECRET = "Bearer sk_live_tenant_secret_51H"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def traced_settings(origin: str, blobs: Path, **tracing: Any) -> Settings:
    return settings_from_dict(
        {
            "upstream": origin,
            "blob": {"url": f"file://{blobs}"},
            "tracing": {"enabled": True, **tracing},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
    )


class Traced:
    """A gateway whose spans go to an in-memory exporter."""

    def __init__(self, client: TestClient, tracing: Tracing, exporter: InMemorySpanExporter):
        self.client, self.tracing, self.exporter = client, tracing, exporter

    async def spans(self, servers: int) -> list[ReadableSpan]:
        """The finished spans once `servers` server spans have ended (polled: a streamed
        answer can reach the client before its handler returns)."""
        deadline = time.monotonic() + 5
        while True:
            self.tracing.provider.force_flush()
            found = list(self.exporter.get_finished_spans())
            if sum(s.kind is SpanKind.SERVER for s in found) >= servers:
                return found
            assert time.monotonic() < deadline, f"{servers} server spans never ended: {found}"
            await asyncio.sleep(0.01)


@pytest.fixture
async def traced(
    redis_url: str, upstream: tuple[CountingUpstream, str], tmp_path: Path
) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    settings = traced_settings(upstream[1], tmp_path / "blobs")
    tracing = Tracing(settings.tracing, exporter)
    app = create_app(settings, redis_url, Metrics(), tracing)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    yield Traced(client, tracing, exporter)
    await client.close()


def one(spans: Sequence[ReadableSpan], test: Callable[[ReadableSpan], bool]) -> ReadableSpan:
    found = [s for s in spans if test(s)]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def server_of(spans: Sequence[ReadableSpan]) -> ReadableSpan:
    return one(spans, lambda s: s.kind is SpanKind.SERVER)


def upstream_of(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    return [s for s in spans if s.kind is SpanKind.CLIENT and s.name == "POST"]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def traceparent(headers: dict[str, str]) -> tuple[str, str, str]:
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00"
    return trace_id, span_id, flags


HEADERS = {"Idempotency-Key": KEY, "Authorization": SECRET}


async def test_a_new_key_is_a_server_span_with_claim_upstream_and_record_children(
    traced: Traced, upstream: tuple[CountingUpstream, str]
) -> None:
    response = await traced.client.post("/pay", data=b"amount=10", headers=HEADERS)
    assert response.status == 201
    spans = await traced.spans(1)
    server = server_of(spans)
    claim = one(spans, lambda s: s.name == CLAIM)
    call = one(upstream_of(spans), lambda s: True)
    record = one(spans, lambda s: s.name == RECORD)
    ctx = server.context
    assert ctx is not None
    for child in (claim, call, record):
        assert child.context is not None and child.context.trace_id == ctx.trace_id
        assert parent_id(child) == ctx.span_id, child.name
    assert server.parent is None  # no caller trace: the gateway starts one
    assert (claim.kind, call.kind, record.kind) == (SpanKind.CLIENT,) * 3
    assert named(spans, REPLAY) == []

    attributes = dict(server.attributes or {})
    assert server.name == "POST api"
    assert attributes["http.request.method"] == "POST"
    assert attributes["url.path"] == "/pay"
    assert attributes["url.scheme"] == "http"
    assert attributes["http.response.status_code"] == 201
    assert attributes["server.address"] == "127.0.0.1"
    assert attributes["server.port"] == traced.client.port
    assert attributes["idempotency.route"] == "api"
    assert attributes["idempotency.outcome"] == "forwarded"
    assert attributes["idempotency.key_digest"] == digest(KEY)
    assert dict(claim.attributes or {})["idempotency.claim.result"] == "CLAIMED"
    assert dict(record.attributes or {})["idempotency.stored"] is True
    call_attributes = dict(call.attributes or {})
    assert call_attributes["http.response.status_code"] == 201
    assert call_attributes["url.full"] == upstream[1] + "/pay"
    assert call_attributes["server.port"] == int(upstream[1].rsplit(":", 1)[1])

    # The upstream continued the trace under the gateway's client span.
    counting = upstream[0]
    assert counting.count("/pay", KEY) == 1
    trace_id, span_id, flags = traceparent(counting.seen_headers[-1])
    assert trace_id == f"{ctx.trace_id:032x}"
    assert call.context is not None and span_id == f"{call.context.span_id:016x}"
    assert int(flags, 16) & 1  # sampled
    # The client span lasts until the answer's last byte, which is before the record.
    assert call.end_time is not None and record.start_time is not None
    assert call.end_time <= record.start_time


async def test_a_replay_is_a_replay_span_and_no_upstream_span(
    traced: Traced, upstream: tuple[CountingUpstream, str]
) -> None:
    first = await traced.client.post("/pay", data=b"amount=10", headers=HEADERS)
    again = await traced.client.post("/pay", data=b"amount=10", headers=HEADERS)
    assert (first.status, again.status) == (201, 201)
    assert await first.read() == await again.read()
    spans = await traced.spans(2)
    servers = [s for s in spans if s.kind is SpanKind.SERVER]
    replayed = one(servers, lambda s: (s.attributes or {})["idempotency.outcome"] == "replayed")
    assert replayed.context is not None
    trace = [s for s in spans if s.context and s.context.trace_id == replayed.context.trace_id]
    replay = one(trace, lambda s: s.name == REPLAY)
    claim = one(trace, lambda s: s.name == CLAIM)
    assert parent_id(replay) == parent_id(claim) == replayed.context.span_id
    assert dict(claim.attributes or {})["idempotency.claim.result"] == "DONE"
    assert upstream_of(trace) == [] and named(trace, RECORD) == []
    assert dict(replayed.attributes or {})["idempotency.key_digest"] == digest(KEY)
    assert upstream[0].count("/pay", KEY) == 1


async def test_the_callers_trace_is_continued_to_the_upstream(
    traced: Traced, upstream: tuple[CountingUpstream, str]
) -> None:
    caller = {
        **HEADERS,
        "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
        "tracestate": "vendor=abc",
    }
    response = await traced.client.post("/pay", data=b"x", headers=caller)
    assert response.status == 201
    server = server_of(await traced.spans(1))
    assert server.context is not None and server.parent is not None
    assert f"{server.context.trace_id:032x}" == CALLER_TRACE
    assert f"{server.parent.span_id:016x}" == CALLER_SPAN
    assert server.parent.is_remote
    seen = upstream[0].seen_headers[-1]
    trace_id, span_id, _ = traceparent(seen)
    assert trace_id == CALLER_TRACE
    assert span_id != CALLER_SPAN  # the gateway's own span is the upstream's parent now
    assert seen["tracestate"] == "vendor=abc"


async def test_an_unsampled_caller_is_not_recorded_but_still_propagated(
    traced: Traced, upstream: tuple[CountingUpstream, str]
) -> None:
    caller = {**HEADERS, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"}
    assert (await traced.client.post("/pay", data=b"x", headers=caller)).status == 201
    traced.tracing.provider.force_flush()
    assert list(traced.exporter.get_finished_spans()) == []
    trace_id, _, flags = traceparent(upstream[0].seen_headers[-1])
    assert trace_id == CALLER_TRACE
    assert not int(flags, 16) & 1  # not sampled, as the caller decided


async def test_conflict_and_mismatch_are_the_spans_outcomes(
    traced: Traced, upstream: tuple[CountingUpstream, str]
) -> None:
    counting = upstream[0]
    first = asyncio.ensure_future(traced.client.post("/gate", data=b"a", headers=HEADERS))
    await asyncio.wait_for(counting.entered.wait(), 5)
    conflict = await traced.client.post("/gate", data=b"a", headers=HEADERS)
    mismatch = await traced.client.post("/gate", data=b"other", headers=HEADERS)
    counting.release.set()
    assert (await first).status == 201
    assert (conflict.status, mismatch.status) == (409, 422)
    spans = await traced.spans(3)
    outcomes = sorted(
        str(dict(s.attributes or {})["idempotency.outcome"])
        for s in spans
        if s.kind is SpanKind.SERVER
    )
    assert outcomes == ["conflict", "forwarded", "mismatch"]
    results = sorted(
        str(dict(s.attributes or {})["idempotency.claim.result"]) for s in named(spans, CLAIM)
    )
    assert results == ["CLAIMED", "IN_FLIGHT", "MISMATCH"]


async def test_no_span_holds_the_raw_key_or_the_tenants_secret(
    traced: Traced, upstream: tuple[CountingUpstream, str]
) -> None:
    client = traced.client
    await client.post("/pay", data=b"a", headers=HEADERS)  # new key
    await client.post("/pay", data=b"a", headers=HEADERS)  # replay
    await client.post("/pay", data=b"b", headers=HEADERS)  # mismatch
    await client.post("/status/500", data=b"a", headers={**HEADERS, "Idempotency-Key": KEY + "5"})
    await client.post("/pay", data=b"a", headers={**HEADERS, "Idempotency-Key": ""})  # rejected
    await client.post(f"/pay?key={KEY}", data=b"a", headers={**HEADERS, "Idempotency-Key": "q"})
    spans = await traced.spans(6)
    texts: list[str] = []
    for span in spans:
        texts.append(span.name)
        texts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())
        for event in span.events:
            texts.append(event.name)
            texts.extend(f"{k}={v}" for k, v in (event.attributes or {}).items())
        if span.status.description:
            texts.append(span.status.description)
    assert len(texts) > 6 * 5
    assert [t for t in texts if KEY in t or "sk_live" in t] == []
    errors = [
        s for s in spans if s.kind is SpanKind.SERVER and s.status.status_code.name == "ERROR"
    ]
    assert [dict(s.attributes or {})["http.response.status_code"] for s in errors] == [500]


async def test_an_unreachable_upstream_is_a_failed_client_span_under_a_502(
    redis_url: str, tmp_path: Path, refused_port: Port
) -> None:
    closed = refused_port.url  # nothing listens there
    exporter = InMemorySpanExporter()
    settings = traced_settings(closed, tmp_path / "blobs")
    tracing = Tracing(settings.tracing, exporter)
    client = TestClient(
        TestServer(create_app(settings, redis_url, Metrics(), tracing), host="127.0.0.1")
    )
    await client.start_server()
    try:
        assert (await client.post("/pay", data=b"a", headers=HEADERS)).status == 502
        spans = await Traced(client, tracing, exporter).spans(1)
    finally:
        await client.close()
    server = server_of(spans)
    call = one(spans, lambda s: s.kind is SpanKind.CLIENT and s.name == "POST")
    assert call.status.status_code is StatusCode.ERROR
    assert dict(call.attributes or {})["error.type"] == "UpstreamUnsent"
    assert "http.response.status_code" not in (call.attributes or {})
    assert server.status.status_code is StatusCode.ERROR
    attributes = dict(server.attributes or {})
    assert (attributes["http.response.status_code"], attributes["error.type"]) == (502, "502")
    assert attributes["idempotency.outcome"] == "error"
    assert named(spans, RECORD) == []  # released, not recorded: a retry runs again


async def test_spans_are_exported_by_otlp_to_the_configured_endpoint(
    redis_url: str, upstream: tuple[CountingUpstream, str], tmp_path: Path
) -> None:
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: web.Request) -> web.Response:
        assert request.headers["Content-Type"] == "application/x-protobuf"
        assert request.headers["X-Api-Key"] == "collector-key"
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        received.append(message)
        return web.Response(content_type="application/x-protobuf", body=b"")

    collector = web.Application()
    collector.router.add_post("/v1/traces", collect)
    receiver = TestServer(collector, host="127.0.0.1")
    await receiver.start_server()
    try:
        settings = traced_settings(
            upstream[1],
            tmp_path / "blobs",
            endpoint=str(receiver.make_url("/v1/traces")),
            headers={"X-Api-Key": "collector-key"},
            service_name="payments-gateway",
        )
        client = TestClient(
            TestServer(create_app(settings, redis_url, Metrics()), host="127.0.0.1")
        )
        await client.start_server()
        try:
            assert (await client.post("/pay", data=b"a", headers=HEADERS)).status == 201
        finally:
            await client.close()  # the gateway's shutdown exports what is queued
    finally:
        await receiver.close()
    names = []
    for message in received:
        for resource_spans in message.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert service["service.name"] == "payments-gateway"
            for scope in resource_spans.scope_spans:
                names.extend(span.name for span in scope.spans)
    assert sorted(names) == sorted(["POST api", CLAIM, "POST", RECORD])


async def test_tracing_off_keeps_the_plain_clients_and_the_callers_traceparent(
    make_gateway: Any, upstream: tuple[CountingUpstream, str]
) -> None:
    client = await make_gateway()
    caller = {**HEADERS, "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    assert (await client.post("/pay", data=b"x", headers=caller)).status == 201
    services = client.server.app[SERVICES]
    assert not isinstance(services.spans, TracedSpans)
    assert not isinstance(services.upstreams, TracedUpstreams)
    assert upstream[0].seen_headers[-1]["traceparent"] == caller["traceparent"]


@pytest.mark.parametrize(
    ("tracing", "error"),
    [
        ({"sample_ratio": 1.5}, "tracing.sample_ratio"),
        ({"endpoint": "collector:4318"}, "tracing.endpoint"),
        ({"exporter": "zipkin"}, "tracing.exporter"),
        ({"service_name": ""}, "tracing.service_name"),
        ({"sampler": "always"}, "tracing.sampler"),
    ],
)
def test_a_bad_tracing_section_names_its_field(tracing: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        settings_from_dict({"tracing": tracing})


def test_tracing_is_off_by_default() -> None:
    assert Settings().tracing.enabled is False


def test_tracing_enabled_without_the_extra_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tracing": {"enabled": True},
                "routes": [{"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:9"}],
            }
        )
    )
    # The extra's absence, as an interpreter without it sees it: importing it fails.
    program = (
        "import sys; sys.modules['opentelemetry'] = None; "
        "from gateway.cli import main; sys.exit(main(['--config', sys.argv[1]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, str(config)],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "otel extra" in lines[0] and "pip install 'idem-gateway[otel]'" in lines[0]
    assert "Traceback" not in done.stderr
