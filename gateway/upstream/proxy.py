"""Forwarding to upstreams: pooled sessions, header hygiene, streaming pass-through."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from gateway.config.settings import Timeouts
from gateway.errors import problem
from gateway.telemetry.requestlog import REQUEST_ID, current
from gateway.upstream.lean import (
    UpstreamAnswer,
    UpstreamPool,
    UpstreamUnsent,
    header_text,
    lean_enough,
)

# Methods whose requests carry no Content-Length when they have no body (as in aiohttp).
_NO_BODY_EXPECTED = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
# Hop-by-hop headers (RFC 9110 7.6.1) are never forwarded, in either direction.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Set by the HTTP layer for the hop it writes, not copied from the other side.
_FRAMING = frozenset({"content-length", "host"})
# The client's body has been read already (or streams as it comes): a 100-continue
# handshake with the upstream would only stall it.
_DROPPED_ALWAYS = (*HOP_BY_HOP, *_FRAMING, "expect")

# What went wrong talking to the upstream, which decides what happens to the key.
UNSENT = "unsent"  # the request never left: a retry is safe
TIMEOUT = "timeout"  # sent, no complete answer in time: outcome unknown
BROKEN = "broken"  # sent, connection reset or answer cut: outcome unknown


def _dropped(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Hop-by-hop names plus those the Connection header lists."""
    names = set(HOP_BY_HOP | _FRAMING)
    for name, value in headers:
        if name.lower() == "connection":
            names.update(token.strip().lower() for token in value.split(",") if token.strip())
    return names


def forward_headers(request: web.Request) -> CIMultiDict[str]:
    """The client's headers for the upstream: hop-by-hop dropped, X-Forwarded-* added."""
    # Copy, then drop by name: both run in multidict's C code, unlike a filter in Python.
    out: CIMultiDict[str] = CIMultiDict(request.headers)
    for name in _DROPPED_ALWAYS:
        out.popall(name, None)
    for value in request.headers.getall("Connection", ()):
        for token in value.split(","):
            out.popall(token.strip(), None)
    peer = request.remote or ""
    prior = out.get("X-Forwarded-For")
    out["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    out["X-Forwarded-Proto"] = request.scheme
    if request.host:
        out["X-Forwarded-Host"] = request.host
    info = current()
    if info is not None:  # the client's id, or the one generated for it
        out[REQUEST_ID] = info.request_id
    return out


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The upstream's answer headers, in order with repeats, hop-by-hop and framing dropped."""
    pairs = [(name.decode("latin-1"), header_text(value)) for name, value in raw]
    dropped = _dropped(pairs)
    return [(name, value) for name, value in pairs if name.lower() not in dropped]


class _HeadWithBody(web.StreamResponse):
    """Sends the head with the first body bytes, in one write, as web.Response does."""

    _send_headers_immediately = False


def start_response(
    status: int,
    reason: str | None,
    headers: Iterable[tuple[str, str]],
    length: int | None,
    extra: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """A streamed answer carrying exactly the given headers (plus `extra`)."""
    response = _HeadWithBody(status=status, reason=reason)
    for name, value in headers:
        response.headers.add(name, value)
    for name, value in (extra or {}).items():
        response.headers[name] = value
    if length is not None:
        response.content_length = length
    return response


def forget_frames(exc: BaseException) -> None:
    """Drop the tracebacks along an upstream failure's chain of causes, once it has been
    classified and logged. Their frames hold the request body, and asyncio's connection
    errors sit in reference cycles that only the garbage collector breaks: while an upstream
    is down, retries with large bodies would otherwise pile up in memory until it runs.
    (Dropped, not cleared: clearing a frame would end a task it belongs to that still runs.)"""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__


def classify(exc: BaseException) -> str:
    """UNSENT when the request cannot have reached the upstream, else TIMEOUT or BROKEN.

    Sound only because neither client ever resends a request by itself (see Upstreams and
    upstream_client): a connect error is then always the first and only attempt.
    """
    unsent = (
        aiohttp.ClientConnectorError | aiohttp.ConnectionTimeoutError | aiohttp.InvalidURL
        | UpstreamUnsent
    )  # fmt: skip
    if isinstance(exc, unsent):
        return UNSENT
    if isinstance(exc, asyncio.TimeoutError):
        return TIMEOUT
    return BROKEN


@functools.lru_cache(maxsize=256)
def client_timeout(timeouts: Timeouts) -> aiohttp.ClientTimeout:
    """aiohttp's own timeouts: only the connection (a pooled one included), which fails as
    ConnectionTimeoutError before anything is sent. The head and the body are timed by
    `open_upstream` and `body_chunks`. Not aiohttp's `sock_read`: its clock restarts on any
    byte the upstream sends after a complete answer (a stray CRLF), and it then fails the
    finished answer's stream, or the next request on that pooled connection, unsent."""
    return aiohttp.ClientTimeout(
        total=None, connect=timeouts.connect, sock_connect=timeouts.connect
    )


def upstream_url(origin: str, request: web.Request) -> URL:
    """The origin plus the request's path and query exactly as sent (an absolute-form
    request target contributes its path and query only). Marked encoded, or aiohttp's
    client would normalise it (`/a/../b%7E` to `/b~`), unlike the lean client."""
    return URL(origin + request.rel_url.raw_path_qs, encoded=True)


async def open_upstream(
    session: aiohttp.ClientSession,
    request: web.Request,
    origin: str,
    headers: Mapping[str, str],
    data: Any,
    timeouts: Timeouts,
) -> aiohttp.ClientResponse:
    """Send the request; the upstream's answer head must arrive within `timeouts.total`."""
    async with asyncio.timeout(timeouts.total):
        return await session.request(
            request.method,
            upstream_url(origin, request),
            headers=headers,
            data=data,
            timeout=client_timeout(timeouts),
            allow_redirects=False,
        )


async def call_upstream(
    upstreams: Upstreams,
    request: web.Request,
    origin: str,
    headers: CIMultiDict[str],
    body: bytes | None,
    timeouts: Timeouts,
) -> aiohttp.ClientResponse | UpstreamAnswer:
    """Send a request whose body is in hand (None: it has none); the answer's head must
    arrive within `timeouts.total`. Over the lean client where it serves the origin, else
    over aiohttp's."""
    pool = upstreams.pool(origin)
    if pool is None or request.method == "HEAD":
        session = upstreams.session(origin)
        return await open_upstream(session, request, origin, headers, body, timeouts)
    return await pool.request(
        request.method, request.rel_url.raw_path_qs, headers.items(), body,
        timeouts.connect, timeouts.total,
    )  # fmt: skip


async def body_chunks(
    upstream: aiohttp.ClientResponse | UpstreamAnswer, timeouts: Timeouts
) -> AsyncIterator[bytes]:
    """The answer's body as it arrives; each wait for more bytes is bounded by `read` (or
    `total`). Only waits for the upstream count: time spent while a slow client holds up
    the writing does not, so a slow client can never make a complete answer look lost."""
    limit = timeouts.read or timeouts.total
    if isinstance(upstream, UpstreamAnswer):
        while chunk := await upstream.read_chunk(limit):
            yield chunk
        return
    content = upstream.content
    while True:
        async with asyncio.timeout(limit):
            chunk = await content.readany()
        if not chunk:
            return
        yield chunk


class Upstreams:
    """Per upstream origin: one pooled keep-alive aiohttp ClientSession, and for a plain
    http:// origin a lean client's pool, which carries every request whose body is in
    hand (or that has none)."""

    def __init__(self, origins: Iterable[str], pool_size: int = 1024) -> None:
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._pools: dict[str, UpstreamPool] = {}
        for origin in origins:
            if lean_enough(origin):
                self._pools[origin] = UpstreamPool(origin, pool_size)
            self._sessions[origin] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=pool_size, limit_per_host=pool_size),
                auto_decompress=False,  # bodies pass through and are recorded byte for byte
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            # aiohttp resends PUT (and other "idempotent" methods) once when a kept-alive
            # connection drops: an upstream could run the operation twice inside one claim.
            self._sessions[origin]._retry_connection = False

    def add(self, origins: Iterable[str]) -> None:
        """Sessions for origins not seen before (a reloaded config); the others stay open."""
        fresh = [origin for origin in origins if origin not in self._sessions]
        added = Upstreams(fresh)
        self._sessions.update(added._sessions)
        self._pools.update(added._pools)

    def session(self, origin: str) -> aiohttp.ClientSession:
        return self._sessions[origin]

    def pool(self, origin: str) -> UpstreamPool | None:
        return self._pools.get(origin)

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        await asyncio.gather(*(session.close() for session in self._sessions.values()))


async def write_quietly(response: web.StreamResponse, chunk: bytes) -> bool:
    """Write to the client; False when it has gone away (the caller carries on without it)."""
    try:
        await response.write(chunk)
    except (ConnectionError, RuntimeError):
        return False
    return True


async def pass_through(
    request: web.Request,
    upstreams: Upstreams,
    origin: str,
    timeouts: Timeouts,
    extra: Mapping[str, str] | None = None,
    body: bytes | None = None,
) -> web.StreamResponse:
    """Forward a request untouched, streaming the body both ways (or sending `body`, when
    the caller has read it already)."""
    headers = forward_headers(request)
    response: web.StreamResponse | None = None
    try:
        if body is None and request.body_exists:  # it streams in: aiohttp's client
            if request.content_length is not None:
                headers["Content-Length"] = str(request.content_length)
            upstream: aiohttp.ClientResponse | UpstreamAnswer = await open_upstream(
                upstreams.session(origin), request, origin, headers, request.content, timeouts
            )
        else:
            if body is None and request.method not in _NO_BODY_EXPECTED:
                body = b""  # Content-Length: 0, as aiohttp sends for such a method
            upstream = await call_upstream(upstreams, request, origin, headers, body, timeouts)
        async with upstream:
            response = start_response(
                upstream.status,
                upstream.reason,
                response_headers(upstream.raw_headers),
                upstream.content_length,
                extra,
            )
            await response.prepare(request)
            async for chunk in body_chunks(upstream, timeouts):
                if not await write_quietly(response, chunk):
                    break
            await response.write_eof()
            return response
    except (TimeoutError, aiohttp.ClientError) as exc:
        forget_frames(exc)
        if response is not None and response.prepared:
            return abort(request, response)
        return upstream_failure(classify(exc), str(exc) or type(exc).__name__)


def abort(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """The answer is cut after its head was sent: close the connection so the client sees it."""
    if request.transport is not None:
        request.transport.close()
    return response


def upstream_failure(kind: str, detail: str, headers: dict[str, str] | None = None) -> web.Response:
    """502 for an unreachable or broken upstream, 504 for one that did not answer in time."""
    if kind == TIMEOUT:
        return problem(504, "upstream-timeout", "Upstream timed out", detail, headers)
    if kind == UNSENT:
        return problem(502, "upstream-unreachable", "Upstream unreachable", detail, headers)
    return problem(502, "upstream-broken", "Upstream connection broken", detail, headers)
