"""Redis memory per stored record, measured from outside, through a gateway process.

    python -m loadtest.probes record_memory [--keys 5000] [--bodies 0,200,1KiB,10KiB,64KiB]
        [--kinds json,random] [--formats unset,1] [--redis-server PATH] [--listpack-value N]

Starts a redis-server (or a valkey-server: `--redis-server PATH`) with stock settings (only
`--save ""` and `--appendonly no`; with `--listpack-value N`, `hash-max-listpack-value N` as
well), an upstream that answers like a typical JSON API, and a gateway (`python -m gateway`,
one worker) with `record_format` unset (what a new deployment writes: format 2 on a Redis of
its own) or set, and per row sends, through one gateway and Redis, the first keys of
`--cold-routes` routes, a route's first SAMPLES less eleven each (measured as "first":
compressed with the shipped dictionary, as a route's are until it has its own), then,
through another, once a route writes with its own dictionary, `--warm` keys and P
more (measured as "warm"). Each measured stretch takes Redis from P keys (a power of two, at
least half of `--keys`, reached by keys not measured) to 2P, over which its key tables double
once: a record bears their growth as on a Redis growing from any size, wherever the stretch
starts (one that crossed a doubling or none counted up to 16 bytes more or less).
Keys are 32 random hex characters, one tenant. The upstream's
answer: `201 Created` with Content-Type, Content-Length, Date, Server, Cache-Control,
Location, ETag, X-Request-Id and Strict-Transport-Security (about 330 bytes of headers), and
a body unique per call: JSON of the asked size (ids, amounts, times and line items, as a
payments API writes them) or random bytes. A figure is `used_memory` growth per record; a row
also gives the median `MEMORY USAGE` of a sample (which leaves out the expires entry and allocator
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
from pathlib import Path
from typing import Final, NamedTuple

import aiohttp
import orjson
import redis
from aiohttp import web

from gateway.config.units import parse_size
from gateway.store.trained import SAMPLES, dictionary_key
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


class Row(NamedTuple):
    format: str  # as asked: "unset", "1" or "2"
    written: str  # what the records are: "1" (a hash) or "2" (a string)
    first: float  # used_memory growth per record over the route's first SAMPLES records
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


RETRIES_503: Final = 20  # tries of a key answered 503


async def _send(
    url: str, keys: list[str], concurrency: int, path: str = "/pay"
) -> tuple[bytes, bytes]:
    """POST each key once, then the last again: the first answer and the replay, each its
    upstream's header lines and body."""
    pending = iter(keys)
    async with aiohttp.ClientSession() as session:

        async def one_at_a_time() -> None:
            for key in pending:
                headers = {"Idempotency-Key": key, "X-Tenant-Id": "tenant-1"}
                for _ in range(
                    RETRIES_503
                ):  # Redis slow on a loaded host: retried, as a client would
                    async with session.post(
                        f"{url}{path}", data=b'{"a":1}', headers=headers
                    ) as answer:
                        await answer.read()
                    if answer.status != 503:
                        break
                    await asyncio.sleep(0.1)
                if answer.status != 201:
                    raise RuntimeError(f"key {key}: {answer.status}")

        await asyncio.gather(*(one_at_a_time() for _ in range(concurrency)))
        seen = []
        for _ in range(2):
            headers = {"Idempotency-Key": keys[-1], "X-Tenant-Id": "tenant-1"}
            async with session.post(f"{url}{path}", data=b'{"a":1}', headers=headers) as answer:
                head = orjson.dumps([list(pair) for pair in _upstreams(list(answer.raw_headers))],
                                    default=bytes.hex)  # fmt: skip
                seen.append(head + b"\n" + await answer.read())
        return seen[0], seen[1]


def measure(args: argparse.Namespace, fmt: str, size: int, kind: str, work: Path) -> Row:
    """One row: the first records of routes without a dictionary of their own, and then a
    warm route's, each phase on a Redis and a gateway of its own, so that each measured
    stretch starts from nearly none and crosses Redis's table growth alike."""
    first, _ = _phase(args, fmt, size, kind, work, cold=True)
    return _phase(args, fmt, size, kind, work, cold=False)[1]._replace(first=first)


def _phase(
    args: argparse.Namespace, fmt: str, size: int, kind: str, work: Path, cold: bool
) -> tuple[float, Row]:
    # The ziplist name: Redis 7 reads it as the listpack one, Redis 6.2 knows only it.
    extra = ["--hash-max-ziplist-value", str(args.listpack_value)] if args.listpack_value else []
    server = RedisServer(extra=extra)
    if args.redis_server:
        server.binary = args.redis_server
    server.start()
    api = TypicalApi(size, kind, seed=size)
    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/{route}", api.handle)
    upstream_port = kept_port()
    client = redis.Redis.from_url(server.url)
    gateway: GatewayProcess | None = None
    routes = _cold_routes(args.cold_routes) if cold else [("payments", "pay")]
    padding = [("pad", "pad")] if cold else []
    try:
        runner = web.AppRunner(app, access_log=None)
        asyncio.get_event_loop().run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", upstream_port)
        asyncio.get_event_loop().run_until_complete(site.start())
        written = {} if fmt == "unset" else {"record_format": int(fmt)}
        config = {
            "redis": {"url": server.url, **written},
            "admin": {"port": kept_port()},
            "state_dir": str(work / f"state-{fmt}-{size}-{kind}-{'cold' if cold else 'warm'}"),
            "routes": [
                {
                    "name": name,
                    "path_prefix": f"/{prefix}",
                    "upstream": f"http://127.0.0.1:{upstream_port}",
                    "scope": ["X-Tenant-Id"],
                    "retention": "24h",
                }
                for name, prefix in [*routes, *padding]
            ],
        }
        gateway = GatewayProcess(config, work).start()
        loop = asyncio.get_event_loop()
        path = f"/{routes[0][1]}"
        loop.run_until_complete(_send(gateway.url, _keys(10), args.concurrency, path))
        if cold:
            # The first records of routes that have no dictionary of their own yet,
            # compressed with the shipped one (each route trains its own on its first
            # SAMPLES: gateway/store/trained.py), of many routes, for a stretch as long as
            # the warm one.
            count = _pad(loop, client, gateway.url, args, "/pad")
            batches = []
            for _, prefix in routes:
                take = min(SAMPLES - 11, count - sum(len(each) for _, each in batches))
                if take > 0:
                    batches.append((f"/{prefix}", _keys(take)))
            if sum(len(each) for _, each in batches) < count:
                raise SystemExit(f"record_memory: {count} first records need more --cold-routes")
            before = int(client.info("memory")["used_memory"])
            for each_path, each in batches:
                loop.run_until_complete(_send(gateway.url, each, args.concurrency, each_path))
            grown = int(client.info("memory")["used_memory"]) - before
            _doubled_once(client, count)
            return grown / count, _NO_ROW
        loop.run_until_complete(_send(gateway.url, _keys(SAMPLES), args.concurrency, path))
        compact = any(True for _ in client.scan_iter(match="idem:payments:*", count=1000))
        if compact:
            pointer = dictionary_key("idem", "payments")
            wait_until(lambda: client.exists(pointer), 30, "the route's own dictionary")
        # Past its training: the records measured are those of a route in its steady state.
        loop.run_until_complete(_send(gateway.url, _keys(args.warm), args.concurrency, path))
        padded = api.calls
        keys = _keys(_pad(loop, client, gateway.url, args, path))
        padded = api.calls - padded
        before = int(client.info("memory")["used_memory"])
        replayed, again = loop.run_until_complete(_send(gateway.url, keys, args.concurrency))
        after = int(client.info("memory")["used_memory"])
        _doubled_once(client, len(keys))
        if replayed != again:
            raise RuntimeError("a replay differs from the first answer")
        sent = 10 + SAMPLES + args.warm + padded + len(keys)
        if api.calls != sent:
            raise RuntimeError(f"{api.calls} upstream calls for {sent}")
        sample = [name for name in client.scan_iter(match="idem:payments:*", count=1000)][:200]
        sample = sample or [name for name in client.scan_iter(match="idem:{*", count=1000)][:200]
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
        return 0.0, Row(
            fmt, "2" if compact else "1", 0.0, size, kind, per, int(statistics.median(usage)),
            value, stored_as,
        )  # fmt: skip
    finally:
        if gateway is not None:
            gateway.stop()
        client.close()
        server.close()
        asyncio.get_event_loop().run_until_complete(app.shutdown())


_NO_ROW: Final = Row("", "", 0.0, 0, "", 0.0, 0, 0, "")
SLACK: Final = 16  # keys short of P before a stretch (`_pad`)


def _pad(
    loop: asyncio.AbstractEventLoop,
    client: redis.Redis,
    url: str,
    args: argparse.Namespace,
    path: str,
) -> int:
    """Keys sent on `path` (unmeasured) until Redis holds nearly a power of two of them, P,
    at least half of `--keys`: P, the keys to measure next. From P keys to 2P Redis's key
    tables double once, so each record measured bears their growth as a Redis growing from
    any size does on average, wherever the stretch starts. SLACK keys short of P, for the
    keys a route's training adds meanwhile (its dictionary and pointer)."""
    held = int(client.dbsize())
    count = 1 << (max(held + SLACK, int(args.keys) // 2) - 1).bit_length()
    loop.run_until_complete(_send(url, _keys(count - SLACK - held), args.concurrency, path))
    return count


def _doubled_once(client: redis.Redis, count: int) -> None:
    """The measured stretch ended short of a second doubling of Redis's tables."""
    if int(client.dbsize()) > 2 * count:
        raise RuntimeError(f"Redis holds {client.dbsize()} keys, past {2 * count}")


def _keys(count: int) -> list[str]:
    return [os.urandom(16).hex() for _ in range(count)]


def _cold_routes(count: int) -> list[tuple[str, str]]:
    """Routes measured before they have a dictionary of their own: (name, path prefix)."""
    return [(f"cold{n}", f"cold{n}") for n in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes record_memory", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--bodies", default="0,200,1KiB,10KiB,64KiB")
    parser.add_argument("--kinds", default="json,random")
    parser.add_argument("--formats", default="unset,1", help="unset, 1 or 2, comma-separated")
    parser.add_argument(
        "--cold-routes",
        type=int,
        default=25,
        help=f"routes whose first {SAMPLES - 1} records are measured as a route's first "
        "(default: %(default)s)",
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--warm",
        type=int,
        default=100,
        help="keys sent once the route writes with its own dictionary, before those measured",
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
                for fmt in args.formats.split(","):
                    row = measure(args, fmt, size, kind, Path(work))
                    rows.append(row)
                    print(
                        f"format {row.format:>5} (writes {row.written})  body {row.body:>6} "
                        f"{row.kind:<6}  used_memory/record: first {SAMPLES} {row.first:6.0f} B, "
                        f"warm {row.used_per_record:6.0f} B  MEMORY USAGE {row.memory_usage:6} B"
                        f"  value {row.value_bytes:6} B  {row.stored_as}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
