"""The claimed call: forward once, stream the answer to the client while recording it, and
settle the key (record, release, keep, or record an unknown outcome)."""

from __future__ import annotations

import contextlib
import logging
import time

from aiohttp import web

from gateway.blobs.recorder import BodyRecorder
from gateway.config.policy import Route
from gateway.core.decision import Settle, on_answer
from gateway.core.headers import answer_headers
from gateway.core.retention import expires
from gateway.errors import BlobError
from gateway.http.answers import abort, send, start_response
from gateway.http.context import Claimed, Services
from gateway.http.heartbeat import Heartbeat
from gateway.http.outgoing import forward_headers, target
from gateway.http.settle import FENCED, record_answer, release, settle_failure
from gateway.telemetry import metrics as m
from gateway.upstream.base import UpstreamError, failure_of, forget_frames

log = logging.getLogger(__name__)


async def forward(s: Services, c: Claimed) -> web.StreamResponse:
    """Call the upstream once, stream its answer to the client and settle the key."""
    route, request = c.route, c.request
    headers = forward_headers(request, route.preserve_host)
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
                    await release(s, c.route, c.key, c.token)  # a retry may run while it streams
                # An answer that is recorded says until when (shadow mode adds nothing).
                enforced = settle is Settle.RECORD and route.mode == "enforce"
                recorded_headers = answer_headers(upstream.raw_headers)
                response = start_response(
                    upstream.status,
                    upstream.reason,
                    recorded_headers,
                    upstream.content_length,
                    expires(route.retention) if enforced else None,
                )
                # A recorded answer's last bytes (its head, when the body is empty) are held
                # back until the outcome is stored: no client sees a complete answer that a
                # crash could leave unrecorded, to be run again by a retry.
                recording = settle is Settle.RECORD
                client_here = recording or await send(response, request, b"")
                held = b""
                limit = route.timeouts.read or route.timeouts.total
                async with BodyRecorder(
                    s.blobs,
                    route.inline_max,
                    route.max_recorded_body,
                    upstream.content_length,
                    route.max_replay_body,
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
                    stored = await record_answer(
                        s,
                        c,
                        upstream.status,
                        upstream.reason,
                        recorded_headers,
                        recorded,
                        beat.lost,
                    )
                    if stored is False and not response.prepared:
                        response.headers.update(FENCED)  # another claim's answer is the record
                    if client_here:
                        client_here = await send(response, request, held)
        except Exception as exc:
            if not isinstance(exc, UpstreamError):
                log.exception("route %s: forwarding failed", route.name)
            kind = failure_of(exc)
            forget_frames(exc)  # the failure is classified: its frames only hold memory now
            failed = await settle_failure(s, c, kind, exc)
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
