"""Redis's own CPU per new key and per replay, and the memory each stored record takes.

    python -m loadtest.probes script_cost [--keys 200000] [--batch 100 | --concurrency N]
                                          [--rounds 2] [--replica] [--hash-value BYTES]
                                          [--redis-server PATH] [--lua DIR ...]

Starts a redis-server on loopback (the one the tests use) and, for each folder of scripts
(default: the gateway's own; name another tree's `lua/` to compare), makes the script calls
the gateway makes, pipelined `--batch` at a time as its coalescer sends them, on one
connection (with `--concurrency N`, unpipelined: one call at a time on each of N connections,
as it sends them to a Redis Cluster). The record is a typical JSON answer (201, eight
headers, a 200-byte body) encoded by the gateway's own `Record`, under keys of the gateway's
own form. Scenarios:

- `new key`: a claim then a completion of each of `--keys` new keys, the body inline;
- `new key, mark_sent`: a claim, a send mark and a completion (routes with `mark_sent`);
- `new key, blob`: the same answer with its body in the blob store (a pointer in Redis);
- `replay`, `replay, blob`: a claim of each completed key, which reads its record.

For each, Redis's CPU per key two ways: the scripts' own run time (`usec` of EVALSHA and
EVAL in `INFO commandstats`), and the redis-server process's user+sys CPU time, which adds
reading, parsing and answering the calls: what a Redis core must supply. For the new keys,
the growth of `used_memory` per stored record (and `MEMORY USAGE` of a sample; with
`--hash-value 1024` a record is a listpack instead of a hash table). It stops by itself and
stops its redis-server.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
import redis.asyncio

from gateway.core.compact import (
    fingerprint_field,
    outcome_identity,
    pack_answer,
    stored_ms,
    v2_fingerprint_field,
)
from gateway.core.keys import digest, record_names
from gateway.core.record import Record
from gateway.store.formats import shipped_codec
from testkit.redis_server import RedisServer

from ..procs import cpu_seconds

LEASE_MS = 30_000
RETENTION_MS = 86_400_000
TENANT = digest("tenant-credential")
FINGERPRINT = hashlib.sha256(b'{"amount":100,"currency":"EUR","reference":"order"}').hexdigest()
BODY = (
    b'{"id":"pay_0123456789abcdef","status":"succeeded","amount":100,"currency":"EUR",'
    b'"reference":"order-2026-11-27-000123","created":"2026-11-27T15:00:00Z",'
    b'"customer":"cus_0123456789abcde","method":"card"}'
)  # 200 bytes
HEADERS = [
    ("Content-Type", "application/json; charset=utf-8"),
    ("Date", "Fri, 27 Nov 2026 15:00:00 GMT"),
    ("Server", "upstream/1.0"),
    ("X-Request-Id", "0123456789abcdef0123456789abcdef"),
    ("Location", "/payments/pay_0123456789abcdef"),
    ("Cache-Control", "no-store"),
    ("ETag", '"5d41402abc4b2a76b9719d911017c592"'),
    ("Strict-Transport-Security", "max-age=31536000"),
]
BLOB_NAME = "0123456789abcdef0123456789abcdef"  # the blob stores' names: 16 random bytes, hex


def answer(blob: bool) -> Record:
    """The typical answer's record, its body inline or in the blob store."""
    sha = hashlib.sha256(BODY).hexdigest()
    return Record(201, HEADERS, len(BODY), sha, BLOB_NAME if blob else None, time.time())


def record(blob: bool) -> tuple[bytes, bytes]:
    """The metadata and the inline body the gateway's completion sends for the answer."""
    return answer(blob).encode(), b"" if blob else BODY


@dataclass
class Row:
    scenario: str
    script_us: float  # commandstats usec per key
    process_us: float  # redis-server user+sys CPU per key
    replica_us: float | None = None  # the replica's redis-server CPU per key (`--replica`)
    bytes_per_record: float | None = None
    memory_usage: int | None = None  # MEMORY USAGE median of a sample


class Calls:
    """Each script's KEYS and ARGV as the gateway sends them, over `keys` keys, records
    written in `record_format`: in pipelines of `batch` calls, or with `concurrency`, one
    call at a time on each of that many connections. Scripts of before format 2 (another
    tree's `--lua`) take one key, and format 1."""

    def __init__(
        self,
        client: redis.Redis,
        lua: Path,
        keys: int,
        batch: int,
        concurrency: int = 0,
        record_format: int = 1,
    ) -> None:
        self.client, self.keys, self.batch, self.concurrency = client, keys, batch, concurrency
        texts = {
            name: path.read_text()
            for name in ("claim", "complete", "sent")
            if (path := lua / f"{name}.lua").exists()
        }
        self.sha = {name: client.script_load(text) for name, text in texts.items()}
        self.both_names = "KEYS[2]" in texts["claim"]  # a release that reads format 2
        self.record_format = record_format if self.both_names else 1
        names = [record_names("idem", "payments", TENANT, digest(f"order-{n}"))
                 for n in range(keys)]  # fmt: skip
        if self.record_format == 2:
            names = [(short, legacy) for legacy, short in names]
        self.names = [first for first, _ in names]
        self.others = [other for _, other in names]

    def token(self, n: int, run: str) -> str:
        return hashlib.md5(f"{run}{n}".encode()).hexdigest()  # 32 hex, as secrets.token_hex(16)

    def run(self, script: str, args: Callable[[int], list[bytes | str | int]]) -> None:
        """`script` on every key."""
        sha = self.sha[script]
        keys = self._keys(script)
        if self.concurrency:
            asyncio.run(self._unpipelined(sha, keys, args))
            return
        for start in range(0, self.keys, self.batch):
            with self.client.pipeline(transaction=False) as pipe:
                for n in range(start, min(start + self.batch, self.keys)):
                    pipe.evalsha(sha, *keys(n), *args(n))
                pipe.execute()

    def _keys(self, script: str) -> Callable[[int], list[str | int]]:
        """The n-th key's KEYS, after their number: a claim reads both of a record's names."""
        if script == "claim" and self.both_names:
            return lambda n: [2, self.names[n], self.others[n]]
        return lambda n: [1, self.names[n]]

    async def _unpipelined(
        self,
        sha: str,
        keys: Callable[[int], list[str | int]],
        args: Callable[[int], list[bytes | str | int]],
    ) -> None:
        url = "redis://{host}:{port}/0".format(**self.client.connection_pool.connection_kwargs)
        client = redis.asyncio.Redis.from_url(url, max_connections=self.concurrency)
        pending = iter(range(self.keys))

        async def one_at_a_time() -> None:
            for n in pending:
                await client.evalsha(sha, *keys(n), *args(n))

        try:
            await asyncio.gather(*(one_at_a_time() for _ in range(self.concurrency)))
        finally:
            await client.aclose()

    def claim(self, run: str, mark: bool = False) -> None:
        now = int(time.time() * 1000)
        # The fingerprint as each layout of format 2 holds it: the claim compares a value's.
        fps = [v2_fingerprint_field(FINGERPRINT), fingerprint_field(FINGERPRINT), ""]
        self.run("claim", lambda n: [FINGERPRINT, self.token(n, run), LEASE_MS, now,
                                     RETENTION_MS, "take", "1" if mark else "", *fps])  # fmt: skip

    def sent(self, run: str) -> None:
        self.run("sent", lambda n: [self.token(n, run)])

    def complete(self, run: str, blob: bool) -> None:
        """The typical answer stored for every key, in this Calls' format (format 2: with the
        shipped dictionary, as a route's first answers are, before it has its own)."""
        stored, field = answer(blob), fingerprint_field(FINGERPRINT)
        identity = outcome_identity("C", field, stored_ms(stored))
        if self.record_format == 2:
            codec, packed = shipped_codec(), pack_answer(stored, b"" if blob else BODY)
            value = codec.pack("C", field, packed, stored_ms(stored))
            self.run("complete", lambda n: [self.token(n, run), "C", value, "", RETENTION_MS,
                                            FINGERPRINT, "2", identity])  # fmt: skip
            return
        meta, body = record(blob)
        self.run("complete", lambda n: [self.token(n, run), "C", meta, body, RETENTION_MS,
                                        FINGERPRINT, "", identity])  # fmt: skip


class Meter:
    """Redis's CPU over a stretch of calls: commandstats and the process's CPU time (and the
    replica's, once it has applied every write of the stretch)."""

    def __init__(self, client: redis.Redis, pid: int, replica: int | None) -> None:
        self.client, self.pid, self.replica = client, pid, replica

    def __enter__(self) -> Meter:
        self.client.config_resetstat()
        self.cpu = cpu_seconds(self.pid)
        self.replica_cpu = cpu_seconds(self.replica) if self.replica else 0.0
        return self

    def __exit__(self, *exc: object) -> None:
        self.process_s = cpu_seconds(self.pid) - self.cpu
        self.replica_s = None
        if self.replica:
            synced(self.client)
            self.replica_s = cpu_seconds(self.replica) - self.replica_cpu
        stats = self.client.info("commandstats")
        self.script_s = sum(
            stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in ("evalsha", "eval")
        ) / 1e6  # fmt: skip

    def row(self, scenario: str, keys: int) -> Row:
        replica = None if self.replica_s is None else self.replica_s * 1e6 / keys
        return Row(scenario, self.script_s * 1e6 / keys, self.process_s * 1e6 / keys, replica)


def synced(client: redis.Redis, timeout: float = 30.0) -> None:
    """Wait until the replica has acknowledged every write the master made."""
    deadline = time.monotonic() + timeout
    while True:
        info = client.info("replication")
        if info.get("slave0", {}).get("offset") == info["master_repl_offset"]:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replica did not catch up: {info}")
        time.sleep(0.05)


def measure(
    client: redis.Redis,
    pids: tuple[int, int | None],
    lua: Path,
    keys: int,
    batch: int,
    concurrency: int = 0,
    record_format: int = 1,
) -> list[Row]:
    """One round of every scenario on a flushed Redis."""
    calls = Calls(client, lua, keys, batch, concurrency, record_format)
    meter, rows = Meter(client, *pids), []
    for blob in (False, True):
        suffix = ", blob" if blob else ""
        client.flushall()
        before = client.info("memory")["used_memory"]
        with meter:
            calls.claim("t")
            calls.complete("t", blob)
        row = meter.row(f"new key{suffix}", keys)
        row.bytes_per_record = (client.info("memory")["used_memory"] - before) / keys
        sample = [client.memory_usage(name, samples=0) or 0 for name in calls.names[:1000]]
        row.memory_usage = int(statistics.median(sample))
        with meter:
            calls.claim("replay")
        rows += [row, meter.row(f"replay{suffix}", keys)]
        if not blob and "sent" in calls.sha:
            client.flushall()
            with meter:
                calls.claim("m", mark=True)
                calls.sent("m")
                calls.complete("m", blob)
            rows.append(meter.row("new key, mark_sent", keys))
    client.flushall()
    return rows


def _server(binary: str | None, extra: list[str] | None = None) -> RedisServer:
    server = RedisServer(extra=extra)
    if binary is not None:
        server.binary = binary
    return server


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=100, help="calls per pipeline")
    parser.add_argument(
        "--concurrency", type=int, default=0, metavar="N",
        help="no pipelines: one call at a time on each of N connections, as the gateway sends "
        "them to a Redis Cluster (or with redis.pipeline: false)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--record-format", type=int, choices=(1, 2), default=1,
        help="the format records are written in (scripts of before format 2 write format 1)",
    )  # fmt: skip
    parser.add_argument("--lua", action="append", type=Path, metavar="DIR")
    parser.add_argument(
        "--hash-value", type=int, metavar="BYTES",
        help="set hash-max-listpack-value (hash-max-ziplist-value before Redis 7): at 1024 a "
        "record is a listpack rather than a hash table",
    )  # fmt: skip
    parser.add_argument(
        "--redis-server",
        metavar="PATH",
        help="another redis-server binary than the tests' (a distribution's, built with jemalloc)",
    )
    parser.add_argument(
        "--replica", action="store_true",
        help="attach a replica: the master's CPU then includes feeding it, and the replica's "
        "own is shown",
    )  # fmt: skip
    args = parser.parse_args(argv)
    folders = args.lua or [Path(__file__).resolve().parents[2] / "lua"]  # the checkout's
    server = _server(args.redis_server)
    server.start()
    replica = None
    try:
        assert server.process is not None
        client = redis.Redis.from_url(server.url)
        if args.replica:
            replica = _server(args.redis_server, ["--replicaof", "127.0.0.1", str(server.port)])
            replica.start()
            assert replica.process is not None
            deadline = time.monotonic() + 10
            while client.info("replication")["connected_slaves"] < 1:
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not connect")
                time.sleep(0.05)
        pids = (server.process.pid, replica.process.pid if replica and replica.process else None)
        info = client.info("server")
        if args.hash_value is not None:
            setting = "hash-max-listpack-value"
            if setting not in client.config_get(setting):
                setting = "hash-max-ziplist-value"
            client.config_set(setting, args.hash_value)
            print(f"{setting} {args.hash_value}")
        meta, _ = record(False)
        allocator = client.info("memory")["mem_allocator"]
        sending = (
            f"one call at a time on each of {args.concurrency} connections"
            if args.concurrency
            else f"{args.batch} calls per pipeline"
        )
        print(
            f"redis-server {info['redis_version']} ({allocator}), {args.keys:,} keys, "
            f"{sending}; record: {len(meta)}-byte metadata ({len(HEADERS)} headers), "
            f"{len(BODY)}-byte body"
        )
        print("| scripts | round | scenario | scripts µs/key | redis-server CPU µs/key "
              "| replica CPU µs/key | used_memory B/record | MEMORY USAGE B |")  # fmt: skip
        print("|---|---:|---|---:|---:|---:|---:|---:|")
        for folder in folders:
            for round_ in range(1, args.rounds + 1):
                rows = measure(
                    client, pids, folder, args.keys, args.batch, args.concurrency,
                    args.record_format,
                )  # fmt: skip
                for r in rows:
                    print(
                        f"| {folder} | {round_} | {r.scenario} | {r.script_us:.2f} "
                        f"| {r.process_us:.2f} | {_cell(r.replica_us, '.2f')} "
                        f"| {_cell(r.bytes_per_record, '.0f')} | {_cell(r.memory_usage, 'd')} |",
                        flush=True,
                    )
        client.close()
    finally:
        if replica is not None:
            replica.close()
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
