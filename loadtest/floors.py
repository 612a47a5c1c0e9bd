"""The floors under the gateway: what one request costs on this stack with none of its work.

`python -m loadtest.floors --kind KIND --port 8082 --upstream http://127.0.0.1:9000` serves
one of three floors, each a row of `loadtest.run`:

- `hop` (the new-key scenario): aiohttp's low-level server and the gateway's own
  upstream client, forwarding each request once, as the gateway does, but with no key, no
  Redis, no record. No new key through the gateway can cost less than this.
- `answer` (the replay scenario): aiohttp's low-level server answering every request with
  the upstream's answer, held in memory, after reading the body. No replay served by
  aiohttp can cost less than this.
- `hop-redis`, `answer-redis`: the same, plus the Redis calls of a new key (two: a claim,
  then the answer stored) or of a replay (one, that reads a record-sized value), made on the
  gateway's own RESP connection with scripts as small as Redis allows. What is left
  above these is the gateway's own work in Python: its checks, decisions and records.
- `raw` (the replay scenario): an asyncio protocol that finds each request's end (its
  Content-Length) and writes the same answer's bytes. Not an HTTP server, no checks at all:
  the cost of a request to Python and the event loop alone, the floor under any server
  written in Python.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from redis.asyncio import Redis

from gateway.store.resp import Endpoint
from gateway.store.resp_pipeline import RespPipeline
from gateway.store.scripts import Script
from gateway.upstream.httptools_client import UpstreamPool

from .bare_proxy import HOP_BY_HOP, HeadWithBody
from .procs import run_server

# The counting upstream's answer to /pay (`loadtest.upstream`), as aiohttp writes it.
BODY = b'{"id":"pay","status":"captured"}'
HEADERS = {"Content-Type": "application/json"}
# The httptools client writes Host and Content-Length itself.
SENT_BY_POOL = HOP_BY_HOP | {"content-length"}


# Stand-ins for the claim, the completion and the replay's read: one Redis command each.
CLAIM = "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 60000)"
COMPLETE = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)"
READ = "return redis.call('GET', KEYS[1])"
RECORD = b"r" * 400  # about a recorded answer's size in Redis


async def serve(kind: str, port: int, upstream: str, redis_url: str | None) -> None:
    if kind == "raw":
        loop = asyncio.get_running_loop()
        server = await loop.create_server(RawAnswer, "127.0.0.1", port, backlog=4096)
        async with server:
            await server.serve_forever()
        return
    calls = await _calls(redis_url) if kind.endswith("-redis") else None
    hop = kind.startswith("hop")
    handle = _hop(UpstreamPool(upstream, 1024), calls) if hop else _answer(calls)
    runner = web.ServerRunner(web.Server(handle, access_log=None))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


Call = Callable[[str, str, bytes], Awaitable[Any]]


async def _calls(redis_url: str | None) -> Call:
    """One script call on the gateway's RESP connection: `call(script, key, value)`."""
    if redis_url is None:
        raise SystemExit("--redis is needed for this kind")
    client = Redis.from_url(redis_url)
    scripts = {}
    for name, lua in (("claim", CLAIM), ("complete", COMPLETE), ("read", READ)):
        scripts[name] = Script(name, lua, await client.script_load(lua))
    await client.set("floor-record", RECORD)
    pipeline = RespPipeline(Endpoint.of(client), 5.0)

    async def call(script: str, key: str, value: bytes) -> Any:
        return await pipeline.call(scripts[script], key, (value,))

    return call


def _answer(calls: Call | None) -> Any:
    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        await request.read()  # a replay reads the body: its fingerprint must match
        if calls is not None:
            await calls("read", "floor-record", b"")
        return await _stored(request)

    return handle


async def _stored(request: web.BaseRequest) -> web.StreamResponse:
    response = HeadWithBody(status=201, headers=HEADERS)
    response.content_length = len(BODY)
    await response.prepare(request)
    await response.write_eof(BODY)
    return response


def _hop(pool: UpstreamPool, calls: Call | None) -> Any:
    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in SENT_BY_POOL]
        body = await request.read()
        key = "floor-" + request.headers.get("Idempotency-Key", "")
        if calls is not None:
            await calls("claim", key, b"token")
        answer = await pool.request(request.method, request.raw_path, headers, body, 5.0, 30.0)
        async with answer:
            response = HeadWithBody(status=answer.status, reason=answer.reason)
            for name, value in answer.raw_headers:
                if name.decode("latin-1").lower() not in HOP_BY_HOP:
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
            chunks = []
            while chunk := await answer.read_chunk(30.0):
                chunks.append(chunk)
            if calls is not None:
                await calls("complete", key, b"".join(chunks))
            await response.write_eof(b"".join(chunks))
            return response

    return handle


class RawAnswer(asyncio.Protocol):
    """Answers each request on the connection, in order, once its body is in."""

    ANSWER = (
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
    )

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        answers = 0
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            at = head.find(b"\ncontent-length:")
            line_end = head.find(b"\r", at + 1)
            size = int(head[at + 16 : line_end if line_end > 0 else None]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + size:
                break
            self.buffer = self.buffer[end + 4 + size :]
            answers += 1
        if answers and self.transport is not None:
            self.transport.write(self.ANSWER * answers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    kinds = ("hop", "hop-redis", "answer", "answer-redis", "raw")
    parser.add_argument("--kind", choices=kinds, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--redis", help="redis:// URL, for the -redis kinds")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    run_server(args.loop, serve(args.kind, args.port, args.upstream.rstrip("/"), args.redis))


if __name__ == "__main__":
    main()
