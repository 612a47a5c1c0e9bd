"""Per request: an X-Request-Id, the gateway-overhead metric and one structured log line."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from .config import Settings
from .errors import problem
from .keys import BadKey, digest, parse_key
from .logs import FIELDS
from .metrics import Metrics
from .requestlog import REQUEST_ID, RequestInfo, begin, end

MAX_REQUEST_ID = 128

access_log = logging.getLogger("gateway.access")
log = logging.getLogger(__name__)


def request_id(request: web.Request) -> str:
    """The client's X-Request-Id when it is sane, else a fresh one (32 hex digits)."""
    given = request.headers.get(REQUEST_ID)
    if given and len(given) <= MAX_REQUEST_ID and all(0x21 <= ord(c) <= 0x7E for c in given):
        return given
    return os.urandom(16).hex()


def key_hash(settings: Settings, request: web.Request) -> str | None:
    """The digest the record's Redis key holds for this request's key; never the key itself."""
    route = settings.route_for(request.path)
    if route is None or request.method not in route.methods:
        return None
    try:
        key = parse_key(request.headers.getall(route.key_header, ()))
    except BadKey:
        return None
    return digest(key) if key is not None else None


def observed(handle: Handler, metrics: Metrics, settings: Callable[[], Settings]) -> Handler:
    """`handle` with a request id on its answer, the overhead metric and the log line.

    A plain wrapper rather than an aiohttp middleware and prepare signal, whose machinery
    costs more per request than everything done here. `settings` gives the current
    settings (they change on reload). Answers streamed by the handler carry the id already
    (`proxy.start_response` reads it from the request's context).
    """

    async def observe(request: web.Request) -> web.StreamResponse:
        info = RequestInfo(request_id(request))
        token = begin(info)
        started = time.monotonic()
        status = 500
        try:
            response = await handle(request)
            status = response.status
            if not response.prepared:
                response.headers[REQUEST_ID] = info.request_id
            return response
        except web.HTTPException as exc:
            status = exc.status
            exc.headers[REQUEST_ID] = info.request_id
            raise
        except Exception as exc:
            # aiohttp answers a malformed request itself (4xx), a client that is gone needs
            # no answer, and an answer whose head is out cannot be replaced: those go on.
            if isinstance(exc, HttpProcessingError | ConnectionError) or request.writer.output_size:
                raise
            log.exception("request %s failed", info.request_id)
            detail = f"the gateway failed on this request; its log names request {info.request_id}"
            response = problem(500, "internal-error", "Internal error", detail)
            response.headers[REQUEST_ID] = info.request_id
            return response
        finally:
            end(token)
            elapsed = time.monotonic() - started
            if info.route:
                overhead = max(0.0, elapsed - info.upstream_seconds)
                metrics.overhead(info.route, overhead)
            if access_log.isEnabledFor(logging.INFO):
                _log(request, info, status, elapsed, settings())

    return observe


def _log(
    request: web.Request, info: RequestInfo, status: int, elapsed: float, settings: Settings
) -> None:
    fields: dict[str, object] = {
        "request_id": info.request_id,
        "method": request.method,
        "path": request.path,  # the query string is left out: it may carry secrets
        "route": info.route or None,
        "key_hash": key_hash(settings, request),
        "outcome": info.outcome or None,
        "status": status,
        "duration_ms": round(elapsed * 1000, 3),
        "upstream_ms": round(info.upstream_seconds * 1000, 3),
    }
    if info.would:
        fields["shadow_would"] = info.would
    access_log.info("request", extra={FIELDS: fields})
