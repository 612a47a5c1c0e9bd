"""The verifying upstream: a payments-like API with no idempotency of its own, which logs
every execution and can be told to fail.

    python -m loadtest.verify.upstream --port P --log FILE

- `POST /{route}/pay`: one execution. It is logged (route, tenant, key, payload digest,
  execution id, the client attempt that caused it, time, answer digest) and remembered
  *before* the answer is written, so a lookup never says "not run" for a call that ran.
  The answer, `201` JSON, is unique per execution: it names the execution id, and so do
  some of its headers (`answer_headers`), so that a replay that drops or alters one shows.
- `POST /{route}/stream`: one execution answered as an event stream (`200`,
  `text/event-stream`, chunked): 5 to 20 events, 5 to 25 ms apart. The first event's data
  is the JSON a `pay` answer is (the execution id among it), each other one names the
  execution, its number and random bytes: no two executions send the same bytes. The whole
  body is drawn and logged before its first byte goes out.
- `GET /{route}/by-key/{key}` (the tenant from `Authorization`): the reconcile lookup,
  `200` with the same body as the key's first execution, `404` if it never ran.
- `POST /__fault?reset=0.2&hang=0.1&hang_seconds=2`: from now on that share of calls is
  reset (half before executing, half after) or executed and then held past the gateway's
  timeout; `POST /__fault` with no shares ends it. `POST /__flush` writes the log out. A
  stream's fault comes before one of its events, drawn: before the first, the head has not
  gone out either; after it, the stream breaks off (reset) or stalls (held) mid-answer.

Each execution's line ends with the body it sends (or would have sent but for its fault),
base64: the bytes every answer of it is held to, an answer cut short to their start.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import itertools
import os
import random
import socket
import struct
import time
from typing import IO

import orjson
from aiohttp import web

from loadtest.procs import run_server
from loadtest.verify.history import digest

JSON = "application/json"
EVENTS = "text/event-stream"
STREAM_EVENTS = (5, 20)  # events in a streamed answer, at least and at most
STREAM_GAP = (0.005, 0.025)  # seconds between two of its events


def tenant_of(request: web.BaseRequest) -> str:
    return request.headers.get("Authorization", "").removeprefix("Bearer ")


class Executions:
    def __init__(self, log: IO[str], seed: int) -> None:
        self.log = log
        self.prefix = f"{os.getpid():x}"
        self.ids = itertools.count(1)
        self.answers: dict[tuple[str, str, str], bytes] = {}  # (route, tenant, key): 1st body
        self.rng = random.Random(seed)
        self.reset = 0.0
        self.hang = 0.0
        self.hang_seconds = 2.0

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        parts = request.path.split("/")
        if request.method == "POST" and len(parts) == 3 and parts[2] == "pay":
            return await self.execute(request, parts[1])
        if request.method == "POST" and len(parts) == 3 and parts[2] == "stream":
            return await self.stream(request, parts[1])
        if request.method in ("GET", "HEAD") and len(parts) == 4 and parts[2] == "by-key":
            found = self.answers.get((parts[1], tenant_of(request), parts[3]))
            if found is None:
                return web.Response(status=404, body=b'{"found":false}', content_type=JSON)
            return web.Response(status=200, body=found, content_type=JSON)
        if request.path == "/__fault":
            self.reset = float(request.query.get("reset", "0"))
            self.hang = float(request.query.get("hang", "0"))
            self.hang_seconds = float(request.query.get("hang_seconds", "2"))
            return web.Response(text="ok")
        if request.path == "/__flush":
            self.log.flush()
            return web.Response(text="ok")
        return web.Response(status=404)

    async def execute(self, request: web.BaseRequest, route: str) -> web.StreamResponse:
        payload = await request.read()
        draw = self.rng.random()
        if draw < self.reset / 2:
            return reset(request)  # received, never executed
        exec_id, first = self.begin(request, route, payload)
        fault = self.fault_of(draw)
        self.logged(request, route, payload, exec_id, first, fault)
        if fault == "reset":
            return reset(request)  # executed, the answer lost
        if fault == "hang":
            await asyncio.sleep(self.hang_seconds)
        return web.Response(status=201, body=first, headers=answer_headers(route, exec_id, first))

    async def stream(self, request: web.BaseRequest, route: str) -> web.StreamResponse:
        """One execution answered as an event stream, its events spread over time; a fault
        comes before one of them (the first: before the head too)."""
        payload = await request.read()
        draw = self.rng.random()
        if draw < self.reset / 2:
            return reset(request)  # received, never executed
        exec_id, first = self.begin(request, route, payload)
        events = [event(1, first)]
        for n in range(2, self.rng.randint(*STREAM_EVENTS) + 1):
            data = orjson.dumps({"x": exec_id, "n": n, "r": os.urandom(6).hex()})
            events.append(event(n, data))
        body = b"".join(events)
        fault = self.fault_of(draw)
        at = self.rng.randrange(len(events)) if fault else len(events)  # the fault's event
        self.logged(request, route, payload, exec_id, body, fault)
        headers = answer_headers(route, exec_id, body, EVENTS)
        response = web.StreamResponse(status=200, headers=headers)
        response.enable_chunked_encoding()
        for n, data in enumerate(events):
            if n == at and fault == "reset":
                return reset(request)
            if n == at:
                await asyncio.sleep(self.hang_seconds)
            if n == 0:
                await response.prepare(request)
            else:
                await asyncio.sleep(self.rng.uniform(*STREAM_GAP))
            await response.write(data)
        await response.write_eof()
        return response

    def begin(self, request: web.BaseRequest, route: str, payload: bytes) -> tuple[str, bytes]:
        """A new execution's id, and the JSON that names it (a `pay` answer's body)."""
        tenant, key = tenant_of(request), request.headers.get("Idempotency-Key", "")
        exec_id = f"x{self.prefix}-{next(self.ids)}"
        body = orjson.dumps(
            {
                "id": exec_id,
                "route": route,
                "tenant": tenant,
                "key": key,
                "payload": digest(payload),
            }
        )
        self.answers.setdefault((route, tenant, key), body)
        return exec_id, body

    def fault_of(self, draw: float) -> str:
        """The fault a call drawn `draw` meets once executed: none, reset or hang."""
        if draw < self.reset:
            return "reset"
        return "hang" if draw < self.reset + self.hang else ""

    def logged(
        self,
        request: web.BaseRequest,
        route: str,
        payload: bytes,
        exec_id: str,
        body: bytes,
        fault: str,
    ) -> None:
        """The execution's line, written before any byte of its answer."""
        tenant, key = tenant_of(request), request.headers.get("Idempotency-Key", "")
        attempt = request.headers.get("X-Attempt", "")
        sent = base64.b64encode(body).decode("ascii")
        self.log.write(
            f"{exec_id}\t{route}\t{tenant}\t{key}\t{digest(payload)}\t{attempt}\t"
            f"{time.time():.6f}\t{digest(body)}\t{fault}\t{sent}\n"
        )


def event(n: int, data: bytes) -> bytes:
    """One server-sent event: its id and its data."""
    return b"id: %d\ndata: %s\n\n" % (n, data)


def answer_headers(
    route: str, exec_id: str, body: bytes, content_type: str = JSON
) -> list[tuple[str, str]]:
    """A payments API's head, in this order (aiohttp adds Content-Length, or for a stream
    Transfer-Encoding, then Date and Server after them): some values differ per execution,
    and Set-Cookie comes twice."""
    return [
        ("Content-Type", content_type),
        ("Location", f"/{route}/payments/{exec_id}"),
        ("ETag", f'"{digest(body)}"'),
        ("Cache-Control", "no-store"),
        ("X-Trace-Id", os.urandom(8).hex()),
        ("Set-Cookie", f"pay={exec_id}; Path=/{route}; HttpOnly"),
        ("Set-Cookie", "seen=1; Path=/"),
    ]


def reset(request: web.BaseRequest) -> web.StreamResponse:
    """Close the connection with a TCP RST (linger 0), answering nothing."""
    transport = request.transport
    if transport is not None and not transport.is_closing():
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):  # it may have closed meanwhile
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=499)  # never written: the connection is gone


async def serve(port: int, log_path: str, seed: int) -> None:
    with open(log_path, "a", buffering=1 << 16) as log:
        executions = Executions(log, seed)
        server = web.Server(executions.handle, access_log=None)
        runner = web.ServerRunner(server, handle_signals=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
        try:
            while True:  # the log reaches the disk at least every 200 ms
                await asyncio.sleep(0.2)
                log.flush()
        finally:
            log.flush()
            await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True, help="the execution log (appended to)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    run_server(args.loop, serve(args.port, args.log, args.seed))


if __name__ == "__main__":
    main()
