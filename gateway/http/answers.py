"""Writing answers to the client: streamed heads and bodies, cut connections, upstream errors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiohttp import hdrs, web

from gateway.core.decision import Failure
from gateway.http.problems import problem


class _HeadWithBody(web.StreamResponse):
    """The upstream's head as it sent it, with the first body bytes, in one write.

    aiohttp adds a `Server` header of its own to every answer: it is taken out again, so an
    upstream that sends none is not given one. Both rely on private parts of aiohttp:
    tests/test_private_apis.py fails when they stop working."""

    _send_headers_immediately = False
    _upstream_server = False  # whether the upstream's headers carry a Server header

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        if not self._upstream_server:
            self.headers.popall(hdrs.SERVER, None)


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
    response._upstream_server = hdrs.SERVER in response.headers
    for name, value in (extra or {}).items():
        response.headers[name] = value
    if length is not None:
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
