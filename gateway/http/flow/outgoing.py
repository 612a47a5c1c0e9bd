"""What the upstream receives of a client's request: its headers, cleaned for the next hop."""

from __future__ import annotations

from aiohttp import hdrs, web
from multidict import CIMultiDict

from gateway.core.headers import DROPPED_FROM_REQUESTS
from gateway.telemetry.requestlog import REQUEST_ID, current


def forward_headers(request: web.Request, preserve_host: bool = False) -> CIMultiDict[str]:
    """The client's headers for the upstream: hop-by-hop dropped, X-Forwarded-* added; the
    client's Host kept where the route says `preserve_host` (else the upstream's own)."""
    # Copy, then drop by name: both run in multidict's C code, unlike a filter in Python.
    out: CIMultiDict[str] = CIMultiDict(request.headers)
    for name in DROPPED_FROM_REQUESTS:
        out.popall(name, None)
    for value in request.headers.getall("Connection", ()):
        for token in value.split(","):
            out.popall(token.strip(), None)
    if preserve_host and hdrs.HOST in request.headers:
        out[hdrs.HOST] = request.headers[hdrs.HOST]
    peer = request.remote or ""
    prior = ", ".join(request.headers.getall("X-Forwarded-For", ()))  # every hop before
    out["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    out["X-Forwarded-Proto"] = request.scheme
    if request.host:
        out["X-Forwarded-Host"] = request.host
    info = current()
    if info is not None:  # the client's id, or the one generated for it
        out[REQUEST_ID] = info.request_id
    return out


def target(request: web.Request) -> str:
    """The path and query exactly as sent (an absolute-form request target contributes its
    path and query only): `/a%2Fb` and `/a/b` are different requests to an upstream."""
    return request.rel_url.raw_path_qs
