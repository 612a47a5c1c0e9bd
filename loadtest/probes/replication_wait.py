"""What `redis.claim_replicas` costs: claim latency and throughput with and without WAIT.

A master and one replica (redis-server, loopback) are started for the run. Each mode makes
`--claims` fresh-key claims through the gateway's Store, `--concurrency` at a time, and
reports claims per second, the latency of one claim (p50, p99), and the CPU time per claim
of the master and of the replica redis-server processes (user+sys; the master's includes the
WAIT, its replication stream and the replica's acknowledgements), with the master's own
`usec_per_call` of WAIT from `INFO commandstats`, and this process's own CPU per claim (the
Store's client side). With `--complete`, each claimed key is completed with a typical answer
(`loadtest.probes script_cost`'s), as a new key is: the CPU columns are then per new key. Modes:
`none` (claim_replicas 0, one EVALSHA per claim), `none+pipeline` (claim_replicas 0, calls of
one loop turn coalesced: the default), `wait-1` (claim_replicas 1: EVALSHA + WAIT 1 in one
pipeline per claim).

    python -m loadtest.probes replication_wait [--claims 5000] [--concurrency 1,50] [--complete]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import redis

from gateway.config.settings import RedisSettings
from gateway.store.breaker import CircuitBreaker
from testkit.redis_server import RedisServer
from testkit.stores import make_store

from ..procs import cpu_seconds
from .script_cost import BODY, answer

MODES = {"none": (0, False), "none+pipeline": (0, True), "wait-1": (1, False)}


async def run(
    url: str,
    replicas: int,
    pipeline: bool,
    claims: int,
    concurrency: int,
    pids: tuple[int, int],
    complete: bool,
) -> str:
    settings = RedisSettings(url=url)
    store = make_store(
        url,
        settings,
        CircuitBreaker(5, 1.0),
        pipeline=pipeline,
        replicas=replicas,
        replicas_timeout=0.5,
    )
    prefix = os.urandom(4).hex()
    latencies: list[float] = []
    queue = iter(range(claims))
    record = answer(blob=False)

    async def worker() -> None:
        for i in queue:
            started = time.perf_counter()
            key = f"idem:{{{prefix}:{i}}}"
            result = await store.claim(key, "fp", "token", 30.0)
            latencies.append(time.perf_counter() - started)
            assert result.outcome.value == "CLAIMED"
            if complete:
                assert await store.complete(key, "token", "fp", record, BODY, 86400.0)

    with redis.Redis.from_url(url) as stats:
        stats.config_resetstat()
        cpu = [cpu_seconds(pid) for pid in pids]
        own = time.process_time()
        try:
            began = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - began
        finally:
            await store.close()
        client = (time.process_time() - own) * 1e6 / claims
        master, replica = (
            (cpu_seconds(pid) - was) * 1e6 / claims for pid, was in zip(pids, cpu, strict=True)
        )
        wait = stats.info("commandstats").get("cmdstat_wait", {}).get("usec_per_call", 0.0)
    cuts = statistics.quantiles(latencies, n=100)
    return (
        f"{claims / elapsed:.0f} | {cuts[49] * 1000:.2f} | {cuts[98] * 1000:.2f} "
        f"| {master:.1f} | {replica:.1f} | {wait:.1f} | {client:.0f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=5000)
    parser.add_argument("--concurrency", default="1,50")
    parser.add_argument("--complete", action="store_true", help="complete each claimed key")
    args = parser.parse_args(argv)
    master = RedisServer()
    master.start()
    replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(master.port)])
    replica.start()
    try:
        with redis.Redis.from_url(master.url) as client:
            deadline = time.monotonic() + 10
            while client.info("replication")["connected_slaves"] < 1:
                assert time.monotonic() < deadline, "the replica did not connect"
                time.sleep(0.05)
        assert master.process is not None and replica.process is not None
        pids = (master.process.pid, replica.process.pid)
        per = "new key" if args.complete else "claim"
        print(
            "| claim_replicas | concurrency | claims/s | claim p50 ms | claim p99 ms "
            f"| master CPU µs/{per} | replica CPU µs/{per} | WAIT µs/call "
            f"| client CPU µs/{per} |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            for mode, (replicas, pipeline) in MODES.items():
                measured = run(
                    master.url, replicas, pipeline, args.claims, concurrency, pids, args.complete
                )
                row = asyncio.run(measured)
                print(f"| {mode} | {concurrency} | {row} |")
    finally:
        replica.close()
        master.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
