"""Writing answers to the client: streamed heads and bodies, cut connections, upstream errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from aiohttp import HttpVersion11, hdrs, web
from aiohttp.helpers import must_be_empty_body, rfc822_formatted_time
from aiohttp.http_writer import StreamWriter

from gateway.core.decision import Failure
from gateway.core.headers import unwritable
from gateway.http.answers.problems import UPSTREAM_BROKEN, UPSTREAM_TIMEOUT, UPSTREAM_UNREACHABLE


class _HeadWithBody(web.StreamResponse):
    """The upstream's head as it sent it, with the first body bytes, in one write.

    Its text holds the upstream's bytes one character per byte (`core.headers.header_text`)
    and is written back as those bytes, where aiohttp would encode it as UTF-8 (`caf\\xe9`
    would leave as `caf\\xc3\\xa9`). aiohttp's own `Server` and default `Content-Type` are
    taken out again, so an upstream that sends none is not given one. These rely on private
    parts of aiohttp: tests/test_private_apis.py fails when they stop working."""

    _send_headers_immediately = False
    _upstream_sent: frozenset[str]  # which of _OWN_DEFAULTS it sent: set by start_response

    async def _prepare_headers(self) -> None:
        # aiohttp drops a 304's Content-Length, which there is the size of the content a 200
        # would carry (RFC 9110 8.6), not this answer's framing: the upstream's is put back
        # where it was. A 204's goes (RFC 9110 8.6 forbids one).
        sent = None
        if self._status == 304 and hdrs.CONTENT_LENGTH in self._upstream_sent:
            sent = list(self._headers.items())
        await super()._prepare_headers()
        for name in (hdrs.SERVER, hdrs.CONTENT_TYPE):
            if name not in self._upstream_sent:
                self.headers.popall(name, None)
        if sent is not None:
            added = [item for item in self._headers.items() if item not in sent]
            self._headers.clear()
            self._headers.extend(sent + added)

    async def _write_headers(self) -> None:
        await super()._write_headers()
        if not (self._reason.isascii() and all(v.isascii() for v in self.headers.values())):
            # aiohttp has buffered the head as UTF-8 (not sent yet: see above); as bytes
            writer = self._payload_writer
            assert isinstance(writer, StreamWriter) and self._req is not None
            version = self._req.version
            status_line = f"HTTP/{version[0]}.{version[1]} {self._status} {self._reason}"
            writer._headers_buf = head_bytes(status_line, self.headers.items())


class _WholeAnswer(web.Response):
    """An answer of the gateway's making that is recorded as an upstream's would be (a
    reconciled one): aiohttp's own `Server` taken out, as its replays have none."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)


def whole_answer(
    status: int,
    reason: str,
    headers: Iterable[tuple[str, str]],
    body: bytes,
    extra: Mapping[str, str],
) -> web.Response:
    """The first answer of a record the gateway made itself, with its body: as its replays
    are written, less the replay's marker."""
    response = _WholeAnswer(status=status, reason=reason, body=body)
    for name, value in headers:
        response.headers.add(name, value)
    for name, value in extra.items():
        response.headers[name] = value
    return response


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
    if any(unwritable(line) for line in lines):
        raise ValueError("a control character in an answer's head")
    return b"\r\n".join(lines) + b"\r\n\r\n"


# What aiohttp adds or takes out of an answer unless told otherwise.
_OWN_DEFAULTS: Final = (hdrs.SERVER, hdrs.CONTENT_TYPE, hdrs.CONTENT_LENGTH)


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
    response._upstream_sent = frozenset(name for name in _OWN_DEFAULTS if name in response.headers)
    for name, value in (extra or {}).items():
        response.headers[name] = value
    if length is not None and hdrs.CONTENT_LENGTH not in response.headers:
        response.content_length = length
    return response


# A head is written from its recorded lines only where no recorded name is one that aiohttp
# or the request id sets per answer, and where the replay's own (`extra`) are none of these
# either, nor one that aiohttp adds or takes out when absent from the record.
_SET_PER_ANSWER: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "x-request-id"}
)
_NOT_EXTRA: Final = _SET_PER_ANSWER | {"content-length", "content-type", "date", "server"}


class _RecordedHead(web.StreamResponse):
    """A recorded answer's head written as its lines were recorded, then the replay's own
    (`extra`, `Date` when none was recorded, `Connection: close`, the request id): the same
    bytes `start_response` gives such an answer, without building and re-checking the
    recorded headers through aiohttp's for every replay. `recorded_response` picks it only
    for answers where the two are the same (tests/test_answers.py holds them side by side).
    Relies on private parts of aiohttp, as `_HeadWithBody` does."""

    _send_headers_immediately = False
    _recorded = b""  # the recorded header lines, each ending CRLF, checked
    _length = 0
    _dated = False  # the recorded lines hold a Date

    async def _prepare_headers(self) -> None:
        # aiohttp's own steps for an HTTP/1.1 answer of known length with a body allowed
        request = self._req
        writer = self._payload_writer
        assert request is not None and writer is not None
        keep_alive = self._keep_alive
        if keep_alive is None:
            keep_alive = self._keep_alive = request.keep_alive
        writer.length = self._length
        if not self._dated:
            self._headers[hdrs.DATE] = rfc822_formatted_time()
        if not keep_alive:
            self._headers[hdrs.CONNECTION] = "close"

    async def _write_headers(self) -> None:
        await super()._write_headers()  # the status line and the replay's own lines
        writer = self._payload_writer
        assert isinstance(writer, StreamWriter) and writer._headers_buf is not None
        own = writer._headers_buf
        if not (self._reason.isascii() and all(v.isascii() for v in self.headers.values())):
            own = head_bytes(f"HTTP/1.1 {self._status} {self._reason}", self.headers.items())
        first = own.index(b"\r\n") + 2  # the recorded lines follow the status line
        writer._headers_buf = own[:first] + self._recorded + own[first:]


def recorded_response(
    request: web.BaseRequest,
    status: int,
    reason: str | None,
    headers: list[tuple[str, str]],
    length: int,
    extra: Mapping[str, str],
) -> web.StreamResponse:
    """`start_response(status, reason, headers, length, extra)` for a recorded answer with a
    body sent whole: its head written from the recorded lines where that gives the same
    bytes (an HTTP/1.1 request, a body allowed, no header the replay sets recorded, a
    recorded Content-Length that is the body's), else `start_response`'s answer."""
    names = {name.lower() for name, _ in headers}
    own = {name.lower() for name in extra}
    lengths = [value for name, value in headers if name.lower() == "content-length"]
    recorded = "".join([f"{name}: {value}\r\n" for name, value in headers])
    if (
        request.version != HttpVersion11
        or must_be_empty_body(request.method, status)
        or not _SET_PER_ANSWER.isdisjoint(names)
        or not _NOT_EXTRA.isdisjoint(own)
        or not own.isdisjoint(names)
        or lengths not in ([], [str(length)])
        or not recorded.isascii()  # aiohttp and head_bytes write other text differently
    ):
        return start_response(status, reason, headers, length, extra)
    response = _RecordedHead(status=status, reason=reason)
    response._recorded = recorded.encode("ascii")
    response._length = length
    response._dated = "date" in names
    for name, value in extra.items():
        response.headers[name] = value
    if not lengths:
        response.headers[hdrs.CONTENT_LENGTH] = str(length)
    return response


async def prepare_quietly(response: web.StreamResponse, request: web.Request) -> bool:
    """Send the head; False when the client has gone away."""
    try:
        await response.prepare(request)
    except (ConnectionError, RuntimeError):
        return False
    return True


def send_head(response: web.StreamResponse) -> None:
    """Send a prepared answer's head now, not with its first body bytes (a follower's: its
    client learns at once that the answer is coming). Relies on aiohttp's payload writer,
    as `_HeadWithBody` does."""
    writer = response._payload_writer
    if isinstance(writer, StreamWriter):
        writer.send_headers()


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


_FAILED: Final = {
    Failure.UNSENT: UPSTREAM_UNREACHABLE,
    Failure.TIMEOUT: UPSTREAM_TIMEOUT,
    Failure.BROKEN: UPSTREAM_BROKEN,
}


def upstream_failure(kind: Failure) -> web.Response:
    """502 for an unreachable or broken upstream, 504 for one that did not answer in time.
    The body says what happened, never where or in which class (that is in the log)."""
    return _FAILED[kind].answer()
