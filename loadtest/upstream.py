"""A counting upstream for the load tests: counts every call per Idempotency-Key.

`python -m loadtest.upstream --port 9000` serves:
- any method on /pay...: counts the call under its key, sleeps `sleep_ms`, answers 201 JSON;
- POST /big: counted as /pay is, answers `size` bytes (the query's `size`, else
  `--big-mib` MiB) with their Content-Length: `BLOCK`, one random MiB, repeated;
- GET /get: a small 200 answer, not counted per key;
- GET /__counts: {"total": n, "keys": {key: calls}}; POST /__reset?sleep_ms=N clears them
  and sets the sleep for the next scenario.
With `--tls-port P --cert FILE --key FILE` it also serves the same counters over TLS on P
(the plain port stays, for the harness's own calls).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import ssl
from collections import Counter

import orjson
from aiohttp import web

from .procs import run_server

MiB = 1 << 20
BLOCK = random.Random(0).randbytes(MiB)  # what /big answers, repeated: the same in every process


class Counting:
    def __init__(self, big: int = MiB) -> None:
        self.calls: Counter[str] = Counter()
        self.total = 0
        self.sleep = 0.0
        self.big = big  # /big's size when the query names none

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path == "/big":
            return await self.big_answer(request)
        if path.startswith("/pay"):
            await request.read()
            self.calls[request.headers.get("Idempotency-Key", "")] += 1
            self.total += 1
            if self.sleep:
                await asyncio.sleep(self.sleep)
            return web.Response(
                status=201,
                body=b'{"id":"pay","status":"captured"}',
                content_type="application/json",
            )
        if path == "/get":
            return web.Response(body=b'{"ok":true}', content_type="application/json")
        if path == "/__counts":
            return web.Response(
                body=orjson.dumps({"total": self.total, "keys": self.calls}),
                content_type="application/json",
            )
        if path == "/__reset":
            self.calls.clear()
            self.total = 0
            self.sleep = float(request.query.get("sleep_ms", "0")) / 1000
            return web.Response(text="ok")
        return web.Response(status=404)

    async def big_answer(self, request: web.BaseRequest) -> web.StreamResponse:
        await request.read()
        self.calls[request.headers.get("Idempotency-Key", "")] += 1
        self.total += 1
        size = int(request.query.get("size", self.big))
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = size
        await response.prepare(request)
        sent = 0
        while sent < size:
            piece = BLOCK[: min(MiB, size - sent)]
            await response.write(piece)
            sent += len(piece)
        await response.write_eof()
        return response


async def serve(
    port: int, tls_port: int | None = None, tls: ssl.SSLContext | None = None, big: int = MiB
) -> None:
    counting = Counting(big)
    server = web.Server(counting.handle, access_log=None)
    runner = web.ServerRunner(server)
    await runner.setup()
    if tls_port is not None:  # first: the harness waits for the plain port
        site = web.TCPSite(runner, "127.0.0.1", tls_port, backlog=4096, ssl_context=tls)
        await site.start()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--tls-port", type=int, help="also serve over TLS on this port")
    parser.add_argument("--cert", help="the TLS port's certificate chain (PEM)")
    parser.add_argument("--key", help="its private key (PEM)")
    parser.add_argument("--big-mib", type=int, default=1, help="/big's size by default")
    args = parser.parse_args()
    tls = None
    if args.tls_port is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.cert, args.key)
    run_server(args.loop, serve(args.port, args.tls_port, tls, args.big_mib * MiB))


if __name__ == "__main__":
    main()
