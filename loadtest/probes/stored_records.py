"""Claim and replay latency with a million records stored, against an empty Redis.

    python -m loadtest.probes stored_records [--records 1000000] [--seconds 5] [--rounds 3]
                                             [--quick]

Starts on loopback two redis-servers, the counting upstream and one gateway (`--workers 1`)
on each Redis. One request through the gateway of the "full" Redis stores a real record
(format 2, the gateways' default on a new Redis); its value is then written under N other
keys' names with its TTL, sent in pipelines of raw commands: a value names no key, so each
filled record is what the gateway would have stored for that key. A filled record is replayed
through the gateway and compared with the original answer before anything is measured.

Then, round after round, alternating between the two gateways, wrk sends new keys and
replays (on the full Redis, of the filled records spread over all N; on the empty one, of
1000 keys completed just before). The upstream's counters check exactly once: no key twice,
every new key answered ran upstream, no replay ran upstream. Prints Redis's used_memory and
the memory per record, and a markdown table; exits 1 if exactly-once failed.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import hiredis
import redis

from gateway.core.keys import digest, record_names, route_of_name, tenant_id

from ..drive import ensure_wrk, prefill
from ..procs import start_redis, start_upstream
from .bench import (
    NEW_KEY,
    REPLAY,
    Gateway,
    Measured,
    drive,
    load_average,
    paired_ratios,
    summary_table,
)

BODY = b'{"amount":100,"currency":"EUR"}'  # what loadtest/wrk/idem.lua sends
BATCH = 5_000  # records per pipeline
PREFIX = "idem"  # the gateways' redis.key_prefix
TEMPLATE = "template"  # the key of the one record made through the gateway


def command(*parts: bytes) -> bytes:
    """One Redis command in RESP."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(part), part))
    return b"".join(out)


def post(url: str, key: str) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        f"{url}/pay",
        data=BODY,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.status, answer.read(), dict(answer.headers)


def sibling(template: str, key: str) -> str:
    """The Redis key of idempotency key `key` on the template record's route and tenant: its
    format-2 name, as the template's (`core.keys.record_names`). The requests send no scope:
    the tenant is the anonymous one of the route's scope headers, however many."""
    route = route_of_name(PREFIX, template)
    assert route is not None, template
    for count in range(1, 9):
        tenant = tenant_id([None] * count)
        if record_names(PREFIX, route, tenant, digest(TEMPLATE))[1] == template:
            return record_names(PREFIX, route, tenant, digest(key))[1]
    raise RuntimeError(f"{template} is no anonymous record of key {TEMPLATE!r}")


def fill(client: redis.Redis, template: str, run: str, count: int) -> float:
    """Store `count` copies of the record at `template` under the keys `{run}-k{i}`, sent in
    pipelines of raw SETs with its TTL: a format-2 value names no key (its fingerprint is the
    request's, which every filled key's replay sends), so each copy is what the gateway would
    have stored for that key; the seconds it took."""
    value = client.get(template)
    assert value is not None, template
    retention = client.pttl(template)
    address = client.connection_pool.connection_kwargs
    started = time.perf_counter()
    with socket.create_connection((address["host"], address["port"])) as sock:
        reader = hiredis.Reader()
        for first in range(0, count, BATCH):
            out = [
                command(b"SET", sibling(template, f"{run}-k{i}").encode(), value, b"PX",
                        b"%d" % retention)
                for i in range(first, min(count, first + BATCH))
            ]  # fmt: skip
            sock.sendall(b"".join(out))
            for n in range(len(out)):
                reply = reader.gets()
                while reply is False:
                    reader.feed(sock.recv(1 << 20))
                    reply = reader.gets()
                if reply != b"OK":
                    raise RuntimeError(f"filling record {first + n}: {reply!r}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="5000 records, 1 round of 1 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.seconds, args.rounds, args.connections = 5000, 1.0, 1, 8
    wrk = ensure_wrk()
    print(f"load average at start: {load_average()}", flush=True)
    rows: list[Measured] = []
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-stored-")))
        upstream = start_upstream(stack, workdir)
        gateways, clients = {}, {}
        for name in ("empty", "full"):
            server = start_redis(stack)
            clients[name] = stack.enter_context(redis.Redis.from_url(server.url))
            gateway = Gateway(name, workdir, upstream.url, server.url)
            stack.callback(gateway.stop)
            gateways[name] = gateway
        memory = {name: client.info("memory")["used_memory"] for name, client in clients.items()}

        # One real record, then N copies of it under the keys wrk's "fixed" mode replays.
        status, original, _ = post(gateways["full"].url, TEMPLATE)
        assert status == 201, status
        names = (k.decode() for k in clients["full"].scan_iter(count=100))
        (template,) = [name for name in names if route_of_name(PREFIX, name) is not None]
        run = f"filled-{time.monotonic_ns()}"
        before = clients["full"].info("memory")["used_memory"]
        took = fill(clients["full"], template, run, args.records)
        filled = clients["full"].info("memory")["used_memory"]
        stored = clients["full"].dbsize()
        sample = [
            clients["full"].memory_usage(k, samples=0)
            for k in list(clients["full"].scan_iter(count=1000))[:1000]
        ]
        # A filled record replays through the gateway as the original answer.
        calls = upstream_calls(upstream.url)
        status, body, headers = post(gateways["full"].url, f"{run}-k{args.records - 1}")
        assert status == 201 and body == original, (status, body)
        assert headers.get("Idempotent-Replayed") == "true", headers
        assert upstream_calls(upstream.url) == calls, "a filled record ran upstream"

        for round_ in range(args.rounds):
            order = ("empty", "full") if round_ % 2 == 0 else ("full", "empty")
            for scenario in (NEW_KEY, REPLAY):
                for name in order:
                    gateway = gateways[name]
                    target = f"{name} ({clients[name].dbsize():,} keys)"
                    if scenario.mode == "unique":
                        key_run, keys, before_run = f"new-{name}-{time.monotonic_ns()}", 1, None
                    elif name == "full":
                        key_run, keys, before_run = run, args.records, None
                    else:
                        key_run, keys = f"replay-{name}-{time.monotonic_ns()}", 1000

                        def before_run(url: str = gateway.url, key_run: str = key_run) -> None:
                            prefill(url, key_run, 1000)

                    row = drive(
                        wrk, gateway, upstream.url, replace(scenario, keys=keys), key_run,
                        args.seconds, args.connections, name, before_run,
                    )  # fmt: skip
                    rows.append(row)
                    print(
                        f"round {round_ + 1} {scenario.name:8} {target:22}: {row.rps:6.0f} RPS "
                        f"p50 {row.p50_ms:5.1f} p99 {row.p99_ms:5.1f} ms once={row.once}",
                        flush=True,
                    )
        final = {name: client.info("memory")["used_memory"] for name, client in clients.items()}
        probe = listpack_probe(clients["full"], template, max(1000, args.records // 10))

    mib = 1 << 20
    print()
    print(
        f"filled {args.records:,} records in {took:.1f} s ({args.records / took:,.0f}/s) "
        f"by the claim and complete scripts; {stored:,} keys in the full Redis"
    )
    print(
        f"used_memory: empty Redis {memory['empty'] / mib:.1f} MiB at start, "
        f"{final['empty'] / mib:.1f} MiB at end; full Redis {before / mib:.1f} MiB before the "
        f"fill, {filled / mib:.1f} MiB after it, {final['full'] / mib:.1f} MiB at end"
    )
    print(
        f"per record: {(filled - before) / args.records:.0f} bytes of used_memory; "
        f"MEMORY USAGE median {sorted(sample)[len(sample) // 2]} bytes "
        f"(a {len(original)}-byte inline body)"
    )
    print(probe)
    print(
        f"{args.connections} connections, wrk -t2, {args.seconds:g} s per run, "
        f"{args.rounds} rounds alternating"
    )
    print(summary_table(rows, ["empty", "full"]))
    print(paired_ratios(rows, "empty", "full"))
    print(f"load average at end: {load_average()}")
    if not all(r.once for r in rows):
        print("EXACTLY-ONCE VIOLATED")
        return 1
    return 0


def listpack_probe(client: redis.Redis, template: str, count: int) -> str:
    """Memory per record when Redis keeps each record as a listpack: the metadata (a few
    hundred bytes) is longer than the default `hash-max-listpack-value` (64), so by default
    every record is a full hash table."""
    setting = "hash-max-listpack-value"  # Redis 7; before it, the same as a ziplist
    if setting not in client.config_get(setting):
        setting = "hash-max-ziplist-value"
    default = client.config_get(setting)[setting]
    encoding = client.object("encoding", template)
    client.config_set(setting, 1024)
    try:
        before = client.info("memory")["used_memory"]
        run = f"listpack-{time.monotonic_ns()}"
        fill(client, template, run, count)
        grown = client.info("memory")["used_memory"] - before
        key = sibling(template, f"{run}-k0")
        usage = client.memory_usage(key, samples=0)
        now = client.object("encoding", key)
    finally:
        client.config_set(setting, default)
    return (
        f"with {setting} {default} (default) a record is a {encoding.decode()}; with "
        f"1024, {count:,} more records took {grown / count:.0f} bytes each of used_memory "
        f"(MEMORY USAGE {usage}, encoding {now.decode()})"
    )


def upstream_calls(upstream: str) -> int:
    with urllib.request.urlopen(f"{upstream}/__counts", timeout=10) as answer:
        return int(json.loads(answer.read())["total"])


if __name__ == "__main__":
    sys.exit(main())
