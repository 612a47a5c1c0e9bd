"""Writing answers to the client: streamed heads and bodies, cut connections, upstream errors."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from aiohttp import hdrs, web
from aiohttp.http_writer import StreamWriter

from gateway.core.decision import Failure
from gateway.http.problems import problem


class _HeadWithBody(web.StreamResponse):
    """The upstream's head as it sent it, with the first body bytes, in one write.

    Its text holds the upstream's bytes one character per byte (`core.headers.header_text`)
    and is written back as those bytes, where aiohttp would encode it as UTF-8 (`caf\\xe9`
    would leave as `caf\\xc3\\xa9`). aiohttp's own `Server` and default `Content-Type` are
    taken out again, so an upstream that sends none is not given one. These rely on private
    parts of aiohttp: tests/test_private_apis.py fails when they stop working."""

    _send_headers_immediately = False
    _upstream_sent: frozenset[str] = frozenset()  # which of Server, Content-Type it sent

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        for name in (hdrs.SERVER, hdrs.CONTENT_TYPE):
            if name not in self._upstream_sent:
                self.headers.popall(name, None)

    async def _write_headers(self) -> None:
        await super()._write_headers()
        if not (self._reason.isascii() and all(v.isascii() for v in self.headers.values())):
            # aiohttp has buffered the head as UTF-8 (not sent yet: see above); as bytes
            writer = self._payload_writer
            assert isinstance(writer, StreamWriter) and self._req is not None
            version = self._req.version
            status_line = f"HTTP/{version[0]}.{version[1]} {self._status} {self._reason}"
            writer._headers_buf = head_bytes(status_line, self.headers.items())


def _as_sent(text: str) -> bytes:
    """Header text back to its bytes; text from elsewhere (an operator's) that is no byte
    string leaves as UTF-8, as aiohttp writes it."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


def head_bytes(status_line: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """An answer's head as bytes; refuses CR, LF and other control bytes in any line, as
    aiohttp does (obs-text, 0x80-0xFF, is allowed: RFC 9110 5.5)."""
    lines = [_as_sent(status_line)]
    lines += [_as_sent(name) + b": " + _as_sent(value) for name, value in headers]
    if any(_FORBIDDEN.search(line) for line in lines):
        raise ValueError("a control character in an answer's head")
    return b"\r\n".join(lines) + b"\r\n\r\n"


_FORBIDDEN = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def start_response(
    status: int,
    reason: str | None,
    headers: Iterable[tuple[str, str]],
    length: int | None,
    extra: Mapping[str, str] | None = None,
) -> web.StreamResponse:
    """A streamed answer carrying exactly the given headers (plus `extra`). Its length is
    the upstream's own `Content-Length` header where `headers` hold one (a HEAD's too),
    else `length` (None: chunked)."""
    response = _HeadWithBody(status=status, reason=reason)
    for name, value in headers:
        response.headers.add(name, value)
    response._upstream_sent = frozenset(
        name for name in (hdrs.SERVER, hdrs.CONTENT_TYPE) if name in response.headers
    )
    for name, value in (extra or {}).items():
        response.headers[name] = value
    if length is not None and hdrs.CONTENT_LENGTH not in response.headers:
        response.content_length = length
    return response


async def prepare_quietly(response: web.StreamResponse, request: web.Request) -> bool:
    """Send the head; False when the client has gone away."""
    try:
        await response.prepare(request)
    except (ConnectionError, RuntimeError):
        return False
    return True


async def write_quietly(response: web.StreamResponse, chunk: bytes) -> bool:
    """Write to the client; False when it has gone away (the caller carries on without it)."""
    try:
        await response.write(chunk)
    except (ConnectionError, RuntimeError):
        return False
    return True


async def send(response: web.StreamResponse, request: web.Request, chunk: bytes) -> bool:
    """Write to the client, sending the head first; False once it has gone away."""
    if not response.prepared and not await prepare_quietly(response, request):
        return False
    return await write_quietly(response, chunk) if chunk else True


def abort(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """The answer is cut after its head was sent: close the connection so the client sees it."""
    if request.transport is not None:
        request.transport.close()
    return response


_FAILED = {
    Failure.UNSENT: (
        502, "upstream-unreachable", "Upstream unreachable",
        "the upstream could not be reached; the request was not sent",
    ),
    Failure.TIMEOUT: (
        504, "upstream-timeout", "Upstream timed out",
        "the upstream did not answer in time; whether it ran the request is unknown",
    ),
    Failure.BROKEN: (
        502, "upstream-broken", "Upstream connection broken",
        "the connection to the upstream broke; whether it ran the request is unknown",
    ),
}  # fmt: skip


def upstream_failure(kind: Failure, headers: dict[str, str] | None = None) -> web.Response:
    """502 for an unreachable or broken upstream, 504 for one that did not answer in time.
    The body says what happened, never where or in which class (that is in the log)."""
    status, slug, title, detail = _FAILED[kind]
    return problem(status, slug, title, detail, headers)
