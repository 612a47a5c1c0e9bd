"""The gateway's clients with spans, used in place of the plain ones when tracing is on:
the store's claims and completions, and the upstream calls with the `traceparent` they send.

Imported only when tracing is on (it needs the otel extra): with tracing off the plain
clients serve and the request path pays nothing.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterable, Iterable
from types import TracebackType

from multidict import CIMultiDict
from opentelemetry.trace import Span
from redis.asyncio import Redis, RedisCluster

from gateway.config.policy import Timeouts
from gateway.core.claims import ClaimResult
from gateway.core.record import Record
from gateway.store.formats import FORMAT_1, RecordFormat
from gateway.store.sending import Sender
from gateway.store.store import Store
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
from gateway.upstream.upstreams import Upstreams


class TracedStore(Store):
    """A Store whose claims and completions (the record) are Redis client spans."""

    # Each argument named: compiled (mypyc), `super().__init__(*args, **kwargs)` passes the
    # tuple and the dict themselves as arguments.
    def __init__(
        self,
        tracing: Tracing,
        client: Redis | RedisCluster,
        sender: Sender,
        *,
        replicas: int = 0,
        replicas_timeout: float = 0.5,
        record_format: RecordFormat = FORMAT_1,
        prefix: str = "idem",
    ) -> None:
        super().__init__(
            client,
            sender,
            replicas=replicas,
            replicas_timeout=replicas_timeout,
            record_format=record_format,
            prefix=prefix,
        )
        self.tracing = tracing

    async def claim(
        self,
        key: str,
        fingerprint: str,
        token: str,
        lease: float,
        hold: float = 0.0,
        take_lost: bool = True,
        mark_sent: bool = False,
        *,
        other: str | None = None,
    ) -> ClaimResult:
        with self.tracing.redis(CLAIM) as span:
            result = await super().claim(
                key,
                fingerprint,
                token,
                lease,
                hold,
                take_lost=take_lost,
                mark_sent=mark_sent,
                other=other,
            )
            span.set_attribute(CLAIM_RESULT, result.outcome.value)
            return result

    async def complete(
        self,
        key: str,
        token: str,
        fingerprint: str,
        record: Record,
        body: bytes,
        retention: float,
    ) -> bool:
        with self.tracing.redis(RECORD) as span:
            stored = await super().complete(key, token, fingerprint, record, body, retention)
            span.set_attribute(STORED, stored)
            return stored


class TracedUpstreams(Upstreams):
    """Upstreams whose calls are client spans, from the request until the answer's last
    byte; the upstream receives the client span's trace context."""

    def __init__(
        self,
        tracing: Tracing,
        origins: Iterable[str],
        pool_size: int = 1024,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(origins, pool_size, tls)
        self.tracing = tracing

    async def send(
        self,
        origin: str,
        method: str,
        target: str,
        headers: CIMultiDict[str],
        body: bytes | AsyncIterable[bytes] | None,
        timeouts: Timeouts,
    ) -> Answer:
        span = self.tracing.upstream(method, origin, target)
        self.tracing.inject(headers, span)  # replaces a traceparent the client sent
        if not span.is_recording():  # not sampled: only the context goes on
            return await super().send(origin, method, target, headers, body, timeouts)
        try:
            answer = await super().send(origin, method, target, headers, body, timeouts)
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
