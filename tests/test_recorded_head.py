"""A replay's head written from its recorded lines is, byte for byte, the head aiohttp's
own path (`start_response`) writes for the same record: both served side by side by a real
aiohttp server on loopback and read back from a raw socket."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from gateway.http.answers.writing import recorded_response, start_response
from gateway.http.server.access import REQUEST_INFO, add_request_id
from gateway.telemetry.requestlog import RequestInfo

from .rawhttp import one_answer

BODY = b'{"id":"pay","status":"captured"}'
TYPICAL = [
    ("Content-Type", "application/json; charset=utf-8"),
    ("Content-Length", str(len(BODY))),
    ("Date", "Wed, 25 Nov 2026 03:47:08 GMT"),
    ("Server", "Python/3.11 aiohttp/3.14.5"),
]
MARKED = {"Idempotent-Replayed": "true", "Idempotency-Expires": "Thu, 26 Nov 2026 03:47:08 GMT"}


@dataclass
class Case:
    headers: list[tuple[str, str]]
    extra: dict[str, str] = field(default_factory=lambda: dict(MARKED))
    status: int = 201
    reason: str | None = None
    size: int = len(BODY)
    fast: bool = True  # whether the recorded lines are written as they are


CASES = {
    "typical": Case(TYPICAL),
    "no-length-no-date": Case([("Content-Type", "text/plain")]),
    "no-headers-no-extra": Case([], extra={}),
    "repeats-in-order": Case(
        [("Set-Cookie", "a=1"), ("X-A", "1"), ("Set-Cookie", "b=2"), ("x-a", "2"), *TYPICAL]
    ),
    "lower-case-length": Case([("content-length", str(len(BODY))), ("date", "x")]),
    "own-reason": Case(TYPICAL, reason="Fine Thanks"),
    "obs-text-reason": Case(TYPICAL, reason="Tr\xe8s bien"),
    "empty-body": Case([("Content-Length", "0")], size=0),
    "other-status": Case(TYPICAL, status=299, reason=None),
    "obs-text-value": Case([("X-Name", "caf\xe9"), *TYPICAL], fast=False),
    "recorded-request-id": Case([("X-Request-Id", "upstream's"), *TYPICAL], fast=False),
    "recorded-marker": Case([("idempotent-replayed", "yes"), *TYPICAL], fast=False),
    "length-not-the-body": Case([("Content-Length", "5")], fast=False),
    "two-lengths": Case([("Content-Length", "32"), ("Content-Length", "32")], fast=False),
    "no-content": Case([("X-A", "1")], status=204, size=0, fast=False),
    "extra-named-server": Case(TYPICAL, extra={"Server": "x"}, fast=False),
}


def request(method: str = "POST", version: str = "1.1", close: bool = False) -> bytes:
    lines = [f"{method} /{{case}}/{{way}} HTTP/{version}", "Host: t", "Content-Length: 0"]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


REQUESTS = {
    "keep-alive": request(),
    "close": request(close=True),
    "http-1.0": request(version="1.0"),
    "head": request(method="HEAD"),
}


@asynccontextmanager
async def serving(taken: dict[str, bool]) -> AsyncIterator[int]:
    """Answers /CASE/WAY with the record of CASES[CASE], written by `start_response`
    (WAY "aiohttp") or `recorded_response` (WAY "recorded"), the request id set as the
    gateway sets it; `taken` says per case whether its recorded lines were written as such."""

    async def answer(request: web.Request) -> web.StreamResponse:
        name, way = request.match_info["case"], request.match_info["way"]
        case = CASES[name]
        request[REQUEST_INFO] = RequestInfo("req-1")
        args = (case.status, case.reason, case.headers, case.size, case.extra)
        if way == "recorded":
            response = recorded_response(request, *args)
            taken[name] = not isinstance(response, type(start_response(*args)))
        else:
            response = start_response(*args)
        await response.prepare(request)
        await response.write(BODY[: case.size])
        await response.write_eof()
        return response

    app = web.Application()
    app.on_response_prepare.append(add_request_id)
    app.router.add_route("*", "/{case}/{way}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)  # the kernel's choice, bound at once
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def _dated_now(answer: bytes, case: Case) -> bytes:
    """The answer with the Date aiohttp adds (the time of sending) masked."""
    if any(name.lower() == "date" for name, _ in case.headers):
        return answer
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: (now)\r\n", answer)


@pytest.mark.parametrize("how", list(REQUESTS))
async def test_a_recorded_head_is_written_as_aiohttp_writes_it(how: str) -> None:
    taken: dict[str, bool] = {}
    async with serving(taken) as port:
        for name, case in CASES.items():
            template = REQUESTS[how]
            sent = {
                way: b"".join((await one_answer(port, template.replace(
                    b"{case}", name.encode()).replace(b"{way}", way.encode())))[1:])
                for way in ("aiohttp", "recorded")
            }  # fmt: skip
            assert _dated_now(sent["recorded"], case) == _dated_now(sent["aiohttp"], case), name
            assert b"X-Request-Id: req-1\r\n" in sent["recorded"], name
            kept = case.fast and how in ("keep-alive", "close")
            assert taken[name] is kept, name
