"""Requests forwarded untouched: unprotected methods and paths, shadow mode, fail-open."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterable, Callable, Mapping
from typing import Final, cast

from aiohttp import web

from gateway.config.policy import Timeouts
from gateway.config.settings import Limits
from gateway.core.headers import answer_headers
from gateway.http.answers.writing import abort, start_response, upstream_failure, write_quietly
from gateway.http.flow.incoming import TimedBody, refuse_slow_body
from gateway.http.flow.outgoing import forward_headers, target
from gateway.upstream.base import UpstreamError, forget_frames
from gateway.upstream.upstreams import Outbound, Upstreams

log = logging.getLogger(__name__)

# Methods whose requests carry no Content-Length when they have no body (as in aiohttp).
_NO_BODY_EXPECTED: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


async def pass_through(
    request: web.Request,
    upstreams: Upstreams,
    origin: str,
    timeouts: Timeouts,
    *,
    extra: Mapping[str, str] | None = None,
    body: bytes | None = None,
    preserve_host: bool = False,
    limits: Limits | None = None,
    upstream_time: Callable[[float], None] | None = None,
) -> web.StreamResponse:
    """Forward a request untouched, streaming the body both ways (or sending `body`, when
    the caller has read it already); a body that streams in is cut when it pauses longer
    than `limits` allow. `upstream_time` is told the seconds the upstream took, a timeout
    or a reset included, so that they are not counted as the gateway's own."""
    headers = forward_headers(request, preserve_host)
    response: web.StreamResponse | None = None
    sent: bytes | AsyncIterable[bytes] | None = body
    timed: TimedBody | None = None
    if body is None and request.body_exists:  # it streams in as the client sends it
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
        if limits is None:
            sent = cast(AsyncIterable[bytes], request.content)
        else:
            # Only pauses are cut: a large upload may take long, and holds only one
            # upstream connection while it flows (as nginx's client_body_timeout).
            sent = timed = TimedBody(request, limits.request_body_gap_timeout, math.inf)
    elif body is None and request.method not in _NO_BODY_EXPECTED:
        sent = b""  # Content-Length: 0, as aiohttp sends for such a method
    started = time.monotonic()
    try:
        upstream = await upstreams.send(
            Outbound(origin, request.method, target(request), headers, sent, timeouts)
        )
        async with upstream:
            response = start_response(
                upstream.status,
                upstream.reason,
                answer_headers(upstream.raw_headers),
                upstream.content_length,
                extra,
            )
            limit = timeouts.read or timeouts.total
            # The head leaves with the first body bytes anyway
            # (`answers.writing.start_response`): prepared after them, a body that fails at once
            # (a transfer coding the gateway cannot undo) is answered 502, as for a keyed
            # request, not by a bare close.
            chunk = await upstream.read_chunk(limit)
            await response.prepare(request)
            while chunk:
                if not await write_quietly(response, chunk):
                    break
                chunk = await upstream.read_chunk(limit)
            if upstream_time is not None:
                upstream_time(time.monotonic() - started)
            await response.write_eof()
            return response
    except UpstreamError as exc:
        log.warning("pass-through to %s failed (%s): %s", origin, exc.failure, exc)
        forget_frames(exc)
        if upstream_time is not None and not (timed is not None and timed.expired):
            upstream_time(time.monotonic() - started)
        if response is not None and response.prepared:
            return abort(request, response)
        if timed is not None and timed.expired:  # the client's body was too slow, not the upstream
            detail = "the request body did not arrive in time; the upstream got part of it"
            return await refuse_slow_body(request, detail)
        failed = upstream_failure(exc.failure)
        failed.headers.update(extra or {})  # a degraded call's failure is marked as it is
        return failed
