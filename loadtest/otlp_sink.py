"""A stand-in OTLP/HTTP collector for the tracing measurements: it accepts every export.

`python -m loadtest.otlp_sink --port 4318` answers 200 to `POST /v1/traces` (protobuf in,
an empty ExportTraceServiceResponse out) and counts the exports in `GET /__counts`, so a
traced gateway pays the full cost of exporting its spans and nothing is retried.
"""

from __future__ import annotations

import argparse
import asyncio

import orjson
from aiohttp import web

from .procs import run_server


class Sink:
    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0

    async def handle(self, request: web.BaseRequest) -> web.Response:
        if request.path == "/v1/traces" and request.method == "POST":
            self.bytes += len(await request.read())
            self.exports += 1
            return web.Response(body=b"", content_type="application/x-protobuf")
        if request.path == "/__counts":
            counts = {"exports": self.exports, "bytes": self.bytes}
            return web.Response(body=orjson.dumps(counts), content_type="application/json")
        return web.Response(status=404)


async def serve(port: int) -> None:
    server = web.Server(Sink().handle, access_log=None)
    runner = web.ServerRunner(server)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    run_server("uvloop", serve(args.port))


if __name__ == "__main__":
    main()
