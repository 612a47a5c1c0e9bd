"""The verifying upstream: a payments-like API with no idempotency of its own, which logs
every execution and can be told to fail.

    python -m loadtest.verify.upstream --port P --log FILE

- `POST /{route}/pay`: one execution. It is logged (route, tenant, key, payload digest,
  execution id, the client attempt that caused it, time, answer digest) and remembered
  *before* the answer is written, so a lookup never says "not run" for a call that ran.
  The answer, `201` JSON, is unique per execution: it names the execution id, and so do
  some of its headers (`answer_headers`), so that a replay that drops or alters one shows.
- `GET /{route}/by-key/{key}` (the tenant from `Authorization`): the reconcile lookup,
  `200` with the same body as the key's first execution, `404` if it never ran.
- `POST /__fault?reset=0.2&hang=0.1&hang_seconds=2`: from now on that share of calls is
  reset (half before executing, half after) or executed and then held past the gateway's
  timeout; `POST /__fault` with no shares ends it. `POST /__flush` writes the log out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
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

JSON = "application/json"


def digest(data: bytes) -> str:
    """A short digest of bytes (payloads and answer bodies), the same on both sides."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


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
        resets = draw < self.reset
        if resets and draw < self.reset / 2:
            return reset(request)  # received, never executed
        received = time.time()
        tenant, key = tenant_of(request), request.headers.get("Idempotency-Key", "")
        exec_id = f"x{self.prefix}-{next(self.ids)}"
        paid = digest(payload)
        body = orjson.dumps(
            {"id": exec_id, "route": route, "tenant": tenant, "key": key, "payload": paid}
        )
        fault = "reset" if resets else "hang" if draw < self.reset + self.hang else ""
        self.answers.setdefault((route, tenant, key), body)
        attempt = request.headers.get("X-Attempt", "")
        self.log.write(
            f"{exec_id}\t{route}\t{tenant}\t{key}\t{paid}\t{attempt}\t{received:.6f}\t"
            f"{digest(body)}\t{fault}\n"
        )
        if fault == "reset":
            return reset(request)  # executed, the answer lost
        if fault == "hang":
            await asyncio.sleep(self.hang_seconds)
        return web.Response(status=201, body=body, headers=answer_headers(route, exec_id, body))


def answer_headers(route: str, exec_id: str, body: bytes) -> list[tuple[str, str]]:
    """A payments API's head, in this order (aiohttp adds Content-Length, Date and Server
    after them): some values differ per execution, and Set-Cookie comes twice."""
    return [
        ("Content-Type", JSON),
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
