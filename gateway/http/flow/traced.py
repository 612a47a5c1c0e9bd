"""What tracing adds to the request path when it is on: spans for the steps of a request (the
replay), for the store's claims and completions, and for the upstream calls, with the
`traceparent` they send.

Imported only when tracing is on (it needs the otel extra): with tracing off the request path
holds `http.flow.context.Spans`, which hands each call back as it is, and the plain upstream
clients serve. Neither wrapper restates what it wraps: a claim or a completion is handed over
as the store's call itself, an upstream call as its `Outbound` request.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Iterable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from opentelemetry.trace import Span

from gateway.core.claims import ClaimResult
from gateway.http.flow.context import Spans
from gateway.telemetry.tracing import (
    CLAIM,
    CLAIM_RESULT,
    RECORD,
    STATUS_CODE,
    STORED,
    Tracing,
    failed,
)
from gateway.upstream.base import Answer
from gateway.upstream.upstreams import Outbound, Upstreams


class TracedSpans(Spans):
    """A step of the request as an internal span; a claim and a completion (the record) as
    Redis client spans, which say what the claim found and whether the record was stored."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def step(self, name: str) -> AbstractContextManager[Any]:
        return self.tracing.span(name)

    async def claim(self, call: Awaitable[ClaimResult]) -> ClaimResult:
        with self.tracing.redis(CLAIM) as span:
            result = await call
            span.set_attribute(CLAIM_RESULT, result.outcome.value)
            return result

    async def record(self, call: Awaitable[bool]) -> bool:
        with self.tracing.redis(RECORD) as span:
            stored = await call
            span.set_attribute(STORED, stored)
            return stored


class TracedUpstreams(Upstreams):
    """Upstreams whose calls are client spans, from the request until the answer's last
    byte; the upstream receives the client span's trace context."""

    # Each argument named: compiled (mypyc), `super().__init__(*args, **kwargs)` passes the
    # tuple and the dict themselves as arguments.
    def __init__(
        self,
        tracing: Tracing,
        origins: Iterable[str],
        pool_size: int = 1024,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(origins, pool_size, tls)
        self.tracing = tracing

    async def send(self, out: Outbound) -> Answer:
        span = self.tracing.upstream(out.method, out.origin, out.target)
        self.tracing.inject(out.headers, span)  # replaces a traceparent the client sent
        if not span.is_recording():  # not sampled: only the context goes on
            return await super().send(out)
        try:
            answer = await super().send(out)
        except BaseException as exc:
            failed(span, exc)
            span.end()
            raise
        span.set_attribute(STATUS_CODE, answer.status)
        return TracedAnswer(answer, span)


class TracedAnswer:
    """An upstream's answer that ends its client span at the body's end (or when left)."""

    def __init__(self, answer: Answer, span: Span) -> None:
        self._answer = answer
        self._span: Span | None = span
        self.status = answer.status
        self.reason = answer.reason
        self.raw_headers = answer.raw_headers
        self.content_length = answer.content_length

    async def read_chunk(self, timeout: float) -> bytes:
        try:
            chunk = await self._answer.read_chunk(timeout)
        except BaseException as exc:
            self._end(exc)
            raise
        if not chunk:
            self._end(None)
        return chunk

    async def __aenter__(self) -> TracedAnswer:
        await self._answer.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._answer.__aexit__(exc_type, exc, tb)
        finally:
            self._end(exc)

    def _end(self, exc: BaseException | None) -> None:
        if self._span is None:
            return
        if exc is not None:
            failed(self._span, exc)
        self._span.end()
        self._span = None
