"""Per request: an X-Request-Id, the gateway-overhead metric and one structured log line."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Final

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.typedefs import Handler

from gateway.telemetry.logs import FIELDS
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.requestlog import REQUEST_ID, RequestInfo, begin, end

REQUEST_INFO: Final = web.RequestKey("idem_request_info", RequestInfo)
MAX_REQUEST_ID: Final = 128
# The access log's status for a request whose client closed the connection first (nginx's).
CLIENT_CLOSED: Final = 499

access_log = logging.getLogger("gateway.http.server.access")


def request_id(request: web.BaseRequest) -> str:
    """The client's X-Request-Id when it is sane, else a fresh one (32 hex digits)."""
    given = request.headers.get(REQUEST_ID)
    if given and len(given) <= MAX_REQUEST_ID and all(0x21 <= ord(c) <= 0x7E for c in given):
        return given
    return os.urandom(16).hex()


def observed(handle: Handler, metrics: Metrics) -> Handler:
    """`handle` with a request id, the overhead metric and the log line: a plain wrapper
    rather than an aiohttp middleware, whose machinery costs more per request than all this.
    The id is put on each answer by `add_request_id`, aiohttp's own error answers included."""

    async def observe(request: web.Request) -> web.StreamResponse:
        info = RequestInfo(request_id(request))
        request[REQUEST_INFO] = info
        token = begin(info)
        started = time.monotonic()
        status = 500
        try:
            response = await handle(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except BaseException:
            if _client_gone(request):  # it hung up mid-request: nothing was sent to it
                status = CLIENT_CLOSED
            raise
        finally:
            end(token)
            elapsed = time.monotonic() - started
            if info.route:
                overhead = max(0.0, elapsed - info.upstream_seconds)
                metrics.overhead(info.route, overhead)
            if access_log.isEnabledFor(logging.INFO):
                _log(request, info, status, elapsed)

    return observe


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


def _log(request: web.Request, info: RequestInfo, status: int, elapsed: float) -> None:
    fields: dict[str, object] = {
        "request_id": info.request_id,
        "method": request.method,
        "path": request.path,  # the query string is left out: it may carry secrets
        "route": info.route or None,
        "key_hash": info.key_hash or None,  # the digest in the record's key, never the key
        "outcome": info.outcome or None,
        "status": status,
        "duration_ms": round(elapsed * 1000, 3),
        "upstream_ms": round(info.upstream_seconds * 1000, 3),
    }
    if info.would:
        fields["shadow_would"] = info.would
    if info.owner_lost:
        fields["owner_lost"] = info.owner_lost
    access_log.info("request", extra={FIELDS: fields})


async def add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: every answer names its request id (a replay's own, too), and an
    HTTP/1.0 request whose body came chunked closes its connection (RFC 9112 6.1): where the
    two ends may read its framing differently, nothing more is read from it."""
    info = request.get(REQUEST_INFO)
    if info is not None:
        response.headers[REQUEST_ID] = info.request_id
    # Raw: aiohttp's error requests have no multidict, and their raw headers are a dict, not
    # the tuple declared (read untyped: compiled code checks a declared type as it reads).
    raw: Any = getattr(request, "raw_headers")  # noqa: B009
    if request.version < HttpVersion11 and any(
        name.lower() == b"transfer-encoding" and b"chunked" in value.lower() for name, value in raw
    ):
        response.force_close()
        response.headers[hdrs.CONNECTION] = "close"  # the head was made before this signal
