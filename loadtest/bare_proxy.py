"""The floor of our stack: a bare aiohttp pass-through proxy, with no idempotency at all.

`python -m loadtest.bare_proxy --port 8081 --upstream http://127.0.0.1:9000` forwards every
request (method, path, headers less hop-by-hop, body) over one pooled keep-alive session and
streams the answer back: the same aiohttp work the gateway does for one hop, and nothing else.
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
from aiohttp import web

from gateway.ops.collector import tune

from .procs import run_server

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer", "host")
)


class HeadWithBody(web.StreamResponse):
    """The head goes out with the first body bytes, in one write (as in the gateway)."""

    _send_headers_immediately = False


async def serve(port: int, upstream: str, tuned_collector: bool = False) -> None:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1024),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
    )

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        body = await request.read()
        async with session.request(
            request.method, upstream + request.raw_path, headers=headers, data=body,
            allow_redirects=False,
        ) as answer:  # fmt: skip
            response = HeadWithBody(status=answer.status, reason=answer.reason)
            for name, value in answer.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    response.headers.add(name, value)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    runner = web.ServerRunner(web.Server(handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    if tuned_collector:
        tune()  # the gateway's collector settings, to show what they do for a bare hop
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--tuned-collector", action="store_true")
    args = parser.parse_args()
    run_server(args.loop, serve(args.port, args.upstream.rstrip("/"), args.tuned_collector))


if __name__ == "__main__":
    main()
