"""Redis memory per stored record, measured from outside, through a gateway process.

    python -m loadtest.probes record_memory [--keys 5000] [--bodies 0,200,1KiB,10KiB,64KiB]
        [--kinds json,random] [--formats 1,2] [--redis-server PATH] [--listpack-value N]

Starts a redis-server with stock settings (only `--save ""` and `--appendonly no`; with
`--listpack-value N`, `hash-max-listpack-value N` as well), an upstream that answers like a
typical JSON API, and a gateway (`python -m gateway`, one worker) with `record_format` set,
and sends `--keys` new keys (32 random hex characters, one tenant) per row. The upstream's
answer: `201 Created` with Content-Type, Content-Length, Date, Server, Cache-Control,
Location, ETag, X-Request-Id and Strict-Transport-Security (about 330 bytes of headers), and
a body unique per call: JSON of the asked size (ids, amounts, times and line items, as a
payments API writes them) or random bytes. A row is `used_memory` growth per record, and
the median `MEMORY USAGE` of a sample (which leaves out the expires entry and allocator
rounding); bodies over the route's `inline_max` (64 KiB) are blob pointers. It checks that
every key ran once and that a replay of the last is the first answer, byte for byte.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import hashlib
import os
import random
import statistics
import string
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import redis
from aiohttp import web

from gateway.config.units import parse_size
from gateway.core.compact import OWN
from gateway.store.trained import SAMPLES, dictionaries_key
from testkit.polling import wait_until
from testkit.ports import kept_port
from testkit.procs import GatewayProcess
from testkit.redis_server import RedisServer

_BASE62 = string.ascii_letters + string.digits


class TypicalApi:
    """201 answers of a payments-like API: every body its own (ids, times, amounts)."""

    def __init__(self, size: int, kind: str, seed: int) -> None:
        self.size, self.kind = size, kind
        self.random = random.Random(seed)
        self.calls = 0

    def _id(self, prefix: str, length: int) -> str:
        return prefix + "".join(self.random.choice(_BASE62) for _ in range(length))

    def body(self, key: str) -> bytes:
        if self.kind == "random":
            return os.urandom(self.size)
        if self.size == 0:
            return b""
        doc: dict[str, object] = {
            "id": self._id("pay_", 24),
            "amount": self.random.randint(100, 999_999),
            "currency": self.random.choice(["EUR", "USD", "GBP"]),
            "status": "captured",
            "created": int(time.time()) - self.random.randint(0, 10_000),
            "reference": key[:16],
        }
        items: list[dict[str, object]] = []
        text = orjson.dumps(doc)
        while len(text) < self.size:  # line items, many at a time, until it is long enough
            more = max(1, (self.size - len(text)) // 60)
            items += [
                {
                    "sku": self._id("sku_", 10),
                    "quantity": self.random.randint(1, 9),
                    "unit_amount": self.random.randint(100, 99_999),
                }
                for _ in range(more)
            ]
            text = orjson.dumps({**doc, "items": items})
        if len(text) > self.size:  # too long: fewer items, then padded to `size` exactly
            doc["pad"] = ""
            while items and len(orjson.dumps({**doc, "items": items})) > self.size:
                items.pop()
            text = orjson.dumps({**doc, "items": items})
            doc["pad"] = "x" * max(0, self.size - len(text))
            text = orjson.dumps({**doc, "items": items})
        return text

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.calls += 1
        body = self.body(request.headers.get("Idempotency-Key", ""))
        payment = self._id("pay_", 24)
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "Date": email.utils.formatdate(usegmt=True),
            "Server": "nginx/1.24.0",
            "Cache-Control": "no-store",
            "Location": f"/v1/payments/{payment}",
            "ETag": f'"{hashlib.md5(body).hexdigest()}"',
            "X-Request-Id": str(uuid.uuid4()),
            "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
        }
        return web.Response(status=201, body=body, headers=headers)


@dataclass
class Row:
    format: int
    body: int
    kind: str
    used_per_record: float
    memory_usage: int
    value_bytes: int  # a format-2 record's STRLEN, median (0 for a hash)
    stored_as: str


# What the gateway adds to or sets on an answer of its own (docs/fidelity.md).
_GATEWAYS: frozenset[bytes] = frozenset(
    {b"idempotent-replayed", b"idempotency-expires", b"x-request-id"}
)


def _upstreams(head: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(name, value) for name, value in head if name.lower() not in _GATEWAYS]


async def _send(url: str, keys: list[str], concurrency: int) -> tuple[bytes, bytes]:
    """POST each key once, then the last again: the first answer and the replay, each its
    upstream's header lines and body."""
    pending = iter(keys)
    async with aiohttp.ClientSession() as session:

        async def one_at_a_time() -> None:
            for key in pending:
                headers = {"Idempotency-Key": key, "X-Tenant-Id": "tenant-1"}
                async with session.post(f"{url}/pay", data=b'{"a":1}', headers=headers) as answer:
                    await answer.read()
                    if answer.status != 201:
                        raise RuntimeError(f"key {key}: {answer.status}")

        await asyncio.gather(*(one_at_a_time() for _ in range(concurrency)))
        seen = []
        for _ in range(2):
            headers = {"Idempotency-Key": keys[-1], "X-Tenant-Id": "tenant-1"}
            async with session.post(f"{url}/pay", data=b'{"a":1}', headers=headers) as answer:
                head = orjson.dumps([list(pair) for pair in _upstreams(list(answer.raw_headers))],
                                    default=bytes.hex)  # fmt: skip
                seen.append(head + b"\n" + await answer.read())
        return seen[0], seen[1]


def measure(args: argparse.Namespace, fmt: int, size: int, kind: str, work: Path) -> Row:
    # The ziplist name: Redis 7 reads it as the listpack one, Redis 6.2 knows only it.
    extra = ["--hash-max-ziplist-value", str(args.listpack_value)] if args.listpack_value else []
    server = RedisServer(extra=extra)
    if args.redis_server:
        server.binary = args.redis_server
    server.start()
    api = TypicalApi(size, kind, seed=size)
    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/pay", api.handle)
    upstream_port = kept_port()
    client = redis.Redis.from_url(server.url)
    gateway: GatewayProcess | None = None
    try:
        runner = web.AppRunner(app, access_log=None)
        asyncio.get_event_loop().run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", upstream_port)
        asyncio.get_event_loop().run_until_complete(site.start())
        config = {
            "redis": {"url": server.url, "record_format": fmt},
            "admin": {"port": kept_port()},
            "state_dir": str(work / f"state-{fmt}-{size}-{kind}"),
            "routes": [
                {
                    "name": "payments",
                    "path_prefix": "/pay",
                    "upstream": f"http://127.0.0.1:{upstream_port}",
                    "scope": ["X-Tenant-Id"],
                    "retention": "24h",
                }
            ],
        }
        gateway = GatewayProcess(config, work).start()
        keys = [os.urandom(16).hex() for _ in range(args.keys)]
        # Scripts, connections, the first tables; in format 2, the route's own dictionary,
        # trained on its first answers (gateway/store/trained.py): the records measured are
        # those of a route in its steady state.
        warm = [os.urandom(16).hex() for _ in range(args.warm)]
        loop = asyncio.get_event_loop()
        loop.run_until_complete(_send(gateway.url, warm, args.concurrency))
        if fmt == 2 and args.warm >= SAMPLES:
            trained = dictionaries_key("idem", "payments")
            wait_until(lambda: client.hexists(trained, str(OWN)), 30, "the route's dictionary")
        before = int(client.info("memory")["used_memory"])
        first, again = loop.run_until_complete(_send(gateway.url, keys, args.concurrency))
        after = int(client.info("memory")["used_memory"])
        if first != again:
            raise RuntimeError("a replay differs from the first answer")
        if api.calls != len(keys) + len(warm):
            raise RuntimeError(f"{api.calls} upstream calls for {len(keys) + len(warm)} keys")
        sample = [name for name in client.scan_iter(count=1000)][:200]
        usage = [int(client.memory_usage(name) or 0) for name in sample]
        kinds = {client.type(name).decode() for name in sample[:20]}
        encodings = {
            client.object("encoding", name).decode()  # type: ignore[union-attr]
            for name in sample[:20]
        }
        stored_as = f"{'/'.join(sorted(kinds))} ({'/'.join(sorted(encodings))})"
        lengths = [int(client.strlen(name)) for name in sample if client.type(name) == b"string"]
        value = int(statistics.median(lengths)) if lengths else 0
        per = (after - before) / len(keys)
        return Row(fmt, size, kind, per, int(statistics.median(usage)), value, stored_as)
    finally:
        if gateway is not None:
            gateway.stop()
        client.close()
        server.close()
        asyncio.get_event_loop().run_until_complete(app.shutdown())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes record_memory", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--bodies", default="0,200,1KiB,10KiB,64KiB")
    parser.add_argument("--kinds", default="json,random")
    parser.add_argument("--formats", default="1,2")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--warm",
        type=int,
        default=SAMPLES + 100,
        help="keys sent before the measured ones (default: past those a route's dictionary "
        "is trained on)",
    )
    parser.add_argument("--redis-server", help="a redis-server binary (default: the tests')")
    parser.add_argument(
        "--listpack-value", type=int, default=0, help="hash-max-listpack-value (default: stock)"
    )
    args = parser.parse_args(argv)
    asyncio.set_event_loop(asyncio.new_event_loop())
    rows = []
    with tempfile.TemporaryDirectory(prefix="idem-memory-") as work:
        for size in [parse_size(each) for each in args.bodies.split(",")]:
            for kind in args.kinds.split(","):
                for fmt in [int(each) for each in args.formats.split(",")]:
                    row = measure(args, fmt, size, kind, Path(work))
                    rows.append(row)
                    print(
                        f"format {row.format}  body {row.body:>6} {row.kind:<6}  "
                        f"used_memory/record {row.used_per_record:8.0f} B  "
                        f"MEMORY USAGE {row.memory_usage:6} B  value {row.value_bytes:6} B  "
                        f"{row.stored_as}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
