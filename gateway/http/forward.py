"""The claimed call: forward once, stream the answer to the client while recording it, and
settle the key (record, release, keep, or record an unknown outcome)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from aiohttp import web

from gateway.blobs.recorder import BodyRecorder, RecordedBody
from gateway.config.policy import Route
from gateway.core.decision import Failure, Settle, failure_status, on_answer, on_failure
from gateway.core.headers import answer_headers
from gateway.core.record import Record
from gateway.core.retention import expires
from gateway.errors import BlobError, StoreUnavailable
from gateway.http.answers import abort, send, start_response, upstream_failure
from gateway.http.context import Services
from gateway.http.heartbeat import Heartbeat
from gateway.http.outgoing import forward_headers, target
from gateway.http.problems import problem
from gateway.telemetry import metrics as m
from gateway.upstream.base import UpstreamError, failure_of, forget_frames

log = logging.getLogger(__name__)

OUTCOME_UNKNOWN = {"Idempotency-Outcome": "unknown"}
# How often a completion that Redis did not take is tried again: from the first pause,
# doubling up to the last.
STORE_BACKOFF = (0.01, 1.0)


@dataclass(slots=True)
class Claimed:
    """A request that owns its key and is being forwarded."""

    request: web.Request
    route: Route
    key: str
    token: str
    body: bytes


async def forward(s: Services, c: Claimed) -> web.StreamResponse:
    """Call the upstream once, stream its answer to the client and settle the key."""
    route, request = c.route, c.request
    headers = forward_headers(request)
    response: web.StreamResponse | None = None
    started = time.monotonic()
    async with Heartbeat(s.store, c.key, c.token, route.lease, s.metrics) as beat:
        try:
            upstream = await s.upstreams.send(
                route.upstream, request.method, target(request), headers, c.body, route.timeouts
            )
            async with upstream:
                settle = on_answer(upstream.status, route)
                if settle is Settle.RELEASE:
                    await _release(s, c)  # a retry may run while this answer streams
                # An answer that is recorded says until when (shadow mode adds nothing).
                enforced = settle is Settle.RECORD and route.mode == "enforce"
                recorded_headers = answer_headers(upstream.raw_headers)
                response = start_response(
                    upstream.status, upstream.reason, recorded_headers,
                    upstream.content_length, expires(route.retention) if enforced else None,
                )  # fmt: skip
                # A recorded answer's last bytes (its head, when the body is empty) are held
                # back until the outcome is stored: no client sees a complete answer that a
                # crash could leave unrecorded, to be run again by a retry.
                recording = settle is Settle.RECORD
                client_here = recording or await send(response, request, b"")
                held = b""
                limit = route.timeouts.read or route.timeouts.total
                async with BodyRecorder(
                    s.blobs, route.inline_max, route.max_recorded_body, upstream.content_length
                ) as recorder:
                    # Only waits for the upstream count towards `limit`: a slow client holding
                    # up the writing can never make a complete answer look lost.
                    while chunk := await upstream.read_chunk(limit):
                        if recording:
                            await recorder.feed(chunk)
                            chunk, held = held, chunk
                        if client_here and chunk:
                            client_here = await send(response, request, chunk)
                    s.metrics.upstream(route.name, time.monotonic() - started)
                    if recording:
                        recorded = await recorder.finish()
                if recording:
                    if recorder.failure is not None:
                        _blob_write_failed(s, route, recorder.failure)
                    elif recorded.blob is not None:
                        s.metrics.blob_written.inc(recorded.size)
                    await _record(s, c, upstream.status, recorded_headers, recorded, beat.lost)
                    if client_here:
                        client_here = await send(response, request, held)
        except Exception as exc:
            if not isinstance(exc, UpstreamError):
                log.exception("route %s: forwarding failed", route.name)
            kind = failure_of(exc)
            forget_frames(exc)  # the failure is classified: its frames only hold memory now
            failed = await _settle_failure(s, c, kind, exc)
            if response is not None and response.prepared:
                return abort(request, response)
            return failed
    s.metrics.request(route.name, request.method, m.FORWARDED)
    if client_here:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write_eof()
    return response


def _blob_write_failed(s: Services, route: Route, exc: BlobError) -> None:
    s.metrics.blob_errors.labels(route.name, exc.reason).inc()
    log.error("route %s: the answer's body was not recorded: %s", route.name, exc)


async def _record(
    s: Services,
    c: Claimed,
    status: int,
    headers: list[tuple[str, str]],
    body: RecordedBody,
    lease_lost: bool,
) -> None:
    record = Record(
        status=status,
        headers=headers,
        size=body.size,
        sha256=body.sha256,
        blob=body.blob,
        completed_at=time.time(),
        extra={"body": body.not_recorded} if body.not_recorded else {},
    )
    stored = await _store_outcome(s, c, record, body.inline)
    if stored is False and body.blob is not None:
        await s.blobs.delete(body.blob)  # no record points at it
    if stored is False or lease_lost:
        s.metrics.lease_lost.labels(c.route.name).inc()
        log.error(
            "lease lost on route %s before the outcome was stored: %s", c.route.name,
            "another owner holds the key" if not stored else "a lease renewal failed",
        )  # fmt: skip


async def _store_outcome(s: Services, c: Claimed, record: Record, body: bytes) -> bool | None:
    """Complete the claim; while Redis is unreachable, keep trying for one lease.

    True: stored. False: the token no longer owns the key, nothing was written. None:
    unknown (Redis did not answer; the last attempt may have been applied).
    """
    deadline = time.monotonic() + c.route.lease
    pause, longest = STORE_BACKOFF
    while True:
        try:
            return await s.store.complete(c.key, c.token, record, body, c.route.retention)
        except StoreUnavailable as exc:
            s.metrics.redis_errors.inc()
            if time.monotonic() + pause > deadline:
                log.error("outcome not stored on route %s: %s", c.route.name, exc)
                return None
            await asyncio.sleep(pause)
            pause = min(pause * 2, longest)


async def _release(s: Services, c: Claimed) -> None:
    try:
        if not await s.store.release(c.key, c.token):
            s.metrics.lease_lost.labels(c.route.name).inc()
            log.warning("release on route %s: the key has another owner now", c.route.name)
    except StoreUnavailable as exc:
        # The lease ends by itself; until then retries get 409.
        s.metrics.redis_errors.inc()
        log.error("release failed on route %s: %s", c.route.name, exc)


async def _settle_failure(
    s: Services, c: Claimed, kind: Failure, exc: BaseException
) -> web.Response:
    route = c.route
    settle = on_failure(kind, route)
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    s.metrics.request(route.name, c.request.method, m.ERROR)
    if kind is not Failure.UNSENT:
        s.metrics.unknown_outcomes.labels(route.name, route.on_unknown_outcome).inc()
        log.warning("route %s: outcome unknown (%s): %s", route.name, kind, detail)
    if settle is Settle.RELEASE:
        await _release(s, c)
    elif settle is Settle.RECORD_UNKNOWN:
        status = failure_status(kind)
        record = Record(
            status=502, headers=[], size=0, sha256="", completed_at=time.time(),
            unknown=True, extra={"failure": kind, "detail": detail[:500], "seen": str(status)},
        )  # fmt: skip
        await _store_outcome(s, c, record, b"")
        return problem(502, "outcome-unknown", "Outcome unknown", detail, dict(OUTCOME_UNKNOWN))
    return upstream_failure(kind, detail)
