"""The claim two ways, for comparison only: our Lua script and WATCH/MULTI/EXEC.

`python -m loadtest.probes claim_bench --url redis://127.0.0.1:6379/0` runs N claims from
`concurrency` concurrent tasks, `per_key` claims per key (so claims of one key race), and
reports claims per second, p50/p99 latency and that exactly one claim per key won. The
optimistic version reads the record under WATCH and writes it in MULTI/EXEC, retrying when
another client touched the key in between; each in-flight transaction holds a connection.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import WatchError

from gateway.cli import new_loop
from gateway.core.claims import Claim
from gateway.store.breaker import CircuitBreaker
from testkit.stores import make_store

LEASE_MS = 30_000


@dataclass
class BenchResult:
    method: str
    claims: int
    seconds: float
    p50_ms: float
    p99_ms: float
    keys: int
    won_once: bool  # every key claimed by exactly one caller
    retries: int = 0
    cpu_us: float = 0.0  # this process's CPU per claim (the client side of the claim)

    @property
    def rps(self) -> float:
        return self.claims / self.seconds


class WatchClaim:
    """The claim as optimistic locking: WATCH, read, MULTI, write, EXEC, retry on conflict."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.retries = 0

    async def __call__(self, key: str, fingerprint: str, token: str) -> Claim:
        async with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    state, fp, owner = await pipe.hmget(key, "s", "f", "t")
                    if state is None:
                        pipe.multi()
                        pipe.hset(key, mapping={"s": "P", "t": token, "f": fingerprint})
                        pipe.pexpire(key, LEASE_MS)
                        await pipe.execute()
                        return Claim.CLAIMED
                    await pipe.unwatch()
                    if fp.decode() != fingerprint:
                        return Claim.MISMATCH
                    if state == b"P":
                        return Claim.CLAIMED if owner.decode() == token else Claim.IN_FLIGHT
                    return Claim.DONE
                except WatchError:
                    self.retries += 1


async def _drive(
    claim: Callable[[str, str, str], Awaitable[Claim]],
    run: str,
    claims: int,
    concurrency: int,
    per_key: int,
) -> tuple[float, list[float], Counter[str]]:
    latencies: list[float] = []
    winners: Counter[str] = Counter()
    counter = iter(range(claims))

    async def worker() -> None:
        for n in counter:
            key = f"bench:{{{run}:{n // per_key}}}"
            started = time.perf_counter()
            outcome = await claim(key, "fp", f"t{n}")
            latencies.append(time.perf_counter() - started)
            if outcome is Claim.CLAIMED:
                winners[key] += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies, winners


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000


async def bench(
    url: str, method: str, claims: int = 20_000, concurrency: int = 200, per_key: int = 10
) -> BenchResult:
    """`method`: "lua" (one EVALSHA a claim), "lua-pipeline" (coalesced on redis-py's
    connections), "lua-resp" (coalesced on the gateway's own connection), or "watch"."""
    pool = BlockingConnectionPool.from_url(url, max_connections=concurrency + 8, timeout=10)
    client = Redis.from_pool(pool)
    run = f"{method}-{time.monotonic_ns()}"
    retries = 0
    cpu = time.process_time()
    try:
        if method == "watch":
            watch = WatchClaim(client)
            seconds, latencies, winners = await _drive(watch, run, claims, concurrency, per_key)
            retries = watch.retries
        else:
            store = make_store(
                breaker=CircuitBreaker(10**6, 1.0),
                client=client,
                pipeline=method in ("lua-pipeline", "lua-resp"),
                pipeline_client="resp" if method == "lua-resp" else "redis-py",
            )

            async def lua(key: str, fingerprint: str, token: str) -> Claim:
                return (await store.claim(key, fingerprint, token, LEASE_MS / 1000)).outcome

            try:
                seconds, latencies, winners = await _drive(lua, run, claims, concurrency, per_key)
            finally:
                await store.close()
    finally:
        await client.aclose()
    cpu_us = (time.process_time() - cpu) * 1e6 / claims
    keys = -(-claims // per_key)
    return BenchResult(
        method, claims, seconds, _percentile(latencies, 50), _percentile(latencies, 99),
        keys, len(winners) == keys and set(winners.values()) == {1}, retries, cpu_us,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--claims", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--per-key", type=int, default=10)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args(argv)
    loop = new_loop(args.loop)
    try:
        for method in ("lua", "watch", "lua-pipeline", "lua-resp"):
            r = loop.run_until_complete(
                bench(args.url, method, args.claims, args.concurrency, args.per_key)
            )
            print(
                f"{r.method:13} {r.rps:8.0f} claims/s  p50 {r.p50_ms:6.1f} ms  "
                f"p99 {r.p99_ms:6.1f} ms  CPU {r.cpu_us:5.1f} µs/claim  retries {r.retries:6d}  "
                f"one winner per key: {r.won_once}"
            )
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
