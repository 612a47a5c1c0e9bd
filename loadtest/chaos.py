"""Chaos run: several gateway processes, random SIGKILLs, Redis memory pressure and a Redis
restart, then a check.

    python -m loadtest.chaos [--seconds 60] [--gateways 3] [--clients 16] [--seed 1]

Everything runs on 127.0.0.1 and stops by itself. First, a gateway is started against a
Redis whose `maxmemory-policy` may evict keys: it must refuse to start (exit 2, one line).
Then clients send a mix of new keys and duplicates to random gateways while gateways are
SIGKILLed and restarted, Redis is put under memory pressure once (`maxmemory` set below
what it holds, with `noeviction`: writes are refused for a while, then the limit is raised
again), and Redis is killed and restarted once. Redis runs with `--appendonly yes
--appendfsync always`, so a restart keeps every acknowledged write (without persistence a
restart forgets all records, and a retry after it would run again: no gateway can do
better then).

At the end, for every key that any client saw a 2xx for, the upstream must have run once
and every 2xx body for the key must be the same bytes. One case is reported apart: a key
whose gateway was killed after it forwarded the request and before it stored the outcome
stays PENDING until its lease ends, and a retry after that runs it again. That is the
contract's crash-recovery rule (at least once across a crash of the owner), visible only
for keys whose client saw its connection cut by the kill. Exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis
from aiohttp import web

from testkit.ports import free_port
from testkit.procs import GatewayProcess
from testkit.redis_server import RedisServer

LEASE = "3s"


@dataclass
class Upstream:
    """A payments-like API that counts how often each key really ran."""

    runs: Counter[str] = field(default_factory=Counter)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    rng: random.Random = field(default_factory=random.Random)

    async def charge(self, request: web.Request) -> web.Response:
        body = await request.read()
        key = request.headers.get("Idempotency-Key", "-")
        self.runs[key] += 1
        await asyncio.sleep(self.rng.choice((0.0, 0.005, 0.02, 0.1, 0.3)))  # a varied upstream
        doc = {"charge": f"ch_{next(self.ids)}", "key": key, "amount": len(body)}
        return web.Response(status=201, body=orjson.dumps(doc), content_type="application/json")


@dataclass
class Tally:
    requests: int = 0
    statuses: Counter[int | str] = field(default_factory=Counter)
    bodies: dict[str, set[bytes]] = field(default_factory=lambda: defaultdict(set))
    cut: Counter[str] = field(default_factory=Counter)  # attempts per key cut by a kill
    kills: int = 0
    redis_restarts: int = 0
    full: bool = False  # Redis is at maxmemory now
    full_seconds: float = 0.0  # how long Redis refused writes (maxmemory, noeviction)
    refused_writes: int = 0  # error replies Redis gave meanwhile (its OOM refusals)
    while_full: Counter[int | str] = field(default_factory=Counter)  # statuses meanwhile


def gateway_config(origin: str, redis_url: str, state_dir: Path) -> dict[str, Any]:
    return {
        "log_level": "warning",
        # Shared by the gateways: one that starts replays the journals of those killed.
        "state_dir": str(state_dir),
        "redis": {
            "url": redis_url,
            "socket_timeout": "500ms",
            "connect_timeout": "500ms",
            "breaker": {"failures": 3, "reset": "300ms"},
        },
        "routes": [
            {
                "name": "charges",
                "path_prefix": "/charge",
                "upstream": origin,
                "lease": LEASE,
                "timeouts": {"total": "10s"},
                "on_unknown_outcome": "record",  # the payments mode: never re-forward
            }
        ],
    }


async def client(
    session: aiohttp.ClientSession,
    gateways: list[GatewayProcess],
    keys: list[tuple[str, bytes]],
    counter: itertools.count[int],
    tally: Tally,
    deadline: float,
    rng: random.Random,
) -> None:
    while time.monotonic() < deadline:
        if not keys or rng.random() < 0.4:
            key, payload = f"c{next(counter)}", rng.randbytes(rng.randint(0, 64))
            keys.append((key, payload))
        else:
            key, payload = rng.choice(keys)
        gateway = rng.choice(gateways)
        tally.requests += 1
        try:
            async with session.post(
                f"{gateway.url}/charge", data=payload, headers={"Idempotency-Key": key}
            ) as resp:
                body = await resp.read()
                tally.statuses[resp.status] += 1
                if tally.full:
                    tally.while_full[resp.status] += 1
                if 200 <= resp.status < 300:
                    tally.bodies[key].add(body)
                elif resp.status in (409, 503):
                    await asyncio.sleep(0.05)  # Retry-After, shortened
        except aiohttp.ClientConnectorError:
            tally.statuses["refused"] += 1  # that gateway is down; nothing was sent
            await asyncio.sleep(0.05)
        except (aiohttp.ClientError, TimeoutError):
            tally.statuses["cut"] += 1  # the gateway died while holding the request
            tally.cut[key] += 1


async def kill_gateways(
    gateways: list[GatewayProcess], tally: Tally, deadline: float, rng: random.Random
) -> None:
    """SIGKILL a random gateway every 1.5-4 s and start it again on the same port."""
    while True:
        await asyncio.sleep(rng.uniform(1.5, 4.0))
        if time.monotonic() > deadline - 3:
            return
        victim = rng.choice(gateways)
        await asyncio.to_thread(victim.kill)
        tally.kills += 1
        await asyncio.sleep(rng.uniform(0.1, 0.8))
        await asyncio.to_thread(victim.start)
        print(f"  {time.strftime('%X')} gateway :{victim.port} killed and restarted", flush=True)


async def restart_redis(redis: RedisServer, tally: Tally, deadline: float) -> None:
    """Half way through, SIGKILL redis-server and start it again on the same port."""
    await asyncio.sleep((deadline - time.monotonic()) / 2)
    await asyncio.to_thread(redis.stop, True)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(redis.start)
    tally.redis_restarts += 1
    print(f"  {time.strftime('%X')} redis-server killed and restarted", flush=True)


async def fill_redis(redis: RedisServer, tally: Tally, deadline: float) -> None:
    """A quarter of the way through, set Redis's `maxmemory` to half of what it holds
    (`noeviction`): every write that may grow memory is refused. Raise it again after 15%
    of the run (4 s at most)."""
    total = deadline - time.monotonic()
    await asyncio.sleep(total / 4)
    client = aioredis.Redis.from_url(redis.url)
    try:
        used = int((await client.info("memory"))["used_memory"])
        before = await _error_replies(client)
        await client.config_set("maxmemory-policy", "noeviction")
        await client.config_set("maxmemory", str(max(1, used // 2)))
        started = time.monotonic()
        tally.full = True
        print(f"  {time.strftime('%X')} redis full: maxmemory {used // 2} of {used}", flush=True)
        await asyncio.sleep(min(4.0, total * 0.15))
        await client.config_set("maxmemory", "0")
        tally.full = False
        tally.full_seconds = time.monotonic() - started
        tally.refused_writes = await _error_replies(client) - before
        print(f"  {time.strftime('%X')} redis maxmemory raised again", flush=True)
    finally:
        await client.aclose()


async def _error_replies(client: aioredis.Redis) -> int:
    """Error replies Redis gave so far (a script's OOM counts as ERR, so all of them)."""
    return int((await client.info("stats"))["total_error_replies"])


def evicting_redis_refused(workdir: Path) -> tuple[bool, str]:
    """Start a gateway against a Redis that may evict keys: it must exit 2 with one line."""
    evicting = RedisServer(extra=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"])
    evicting.start()
    try:
        config = gateway_config("http://127.0.0.1:9", evicting.url, workdir / "evicting")
        gateway = GatewayProcess(config, workdir)
        code = gateway.exits()
        lines = gateway.log_path.read_text().strip().splitlines()
    finally:
        evicting.close()
    said = lines[0] if lines else ""
    return code == 2 and len(lines) == 1, f"exit {code}, {len(lines)} line(s): {said}"


def check(upstream: Upstream, tally: Tally) -> tuple[list[str], int]:
    """The violations found, and how many keys ran again after their owner was killed."""
    violations: list[str] = []
    rerun_after_kill = 0
    for key, bodies in tally.bodies.items():
        runs = upstream.runs[key]
        if len(bodies) != 1:
            violations.append(f"{key}: {len(bodies)} different 2xx bodies")
        if runs == 0:
            violations.append(f"{key}: a 2xx but the upstream never ran it")
        elif runs > 1:
            # Each run beyond the first needs an attempt whose gateway was killed under it.
            if runs - 1 <= tally.cut[key]:
                rerun_after_kill += 1
            else:
                cut = tally.cut[key]
                violations.append(f"{key}: ran {runs} times, {cut} attempts cut by a kill")
    return violations, rerun_after_kill


async def run(
    seconds: float, n_gateways: int, n_clients: int, seed: int, persist: bool = True
) -> int:
    rng = random.Random(seed)
    upstream = Upstream(rng=random.Random(seed + 1))
    app = web.Application()
    app.router.add_post("/charge", upstream.charge)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    origin = f"http://127.0.0.1:{port}"

    # --no-persistence shows what the check catches when a Redis restart forgets records.
    aof = ["--appendonly", "yes", "--appendfsync", "always"] if persist else []
    redis = RedisServer(extra=[*aof, "--maxmemory-policy", "noeviction"])
    redis.start()
    workdir = Path(tempfile.mkdtemp(prefix="idem-chaos-"))
    config = gateway_config(origin, redis.url, workdir / "state")
    gateways = [GatewayProcess(dict(config), workdir) for _ in range(n_gateways)]
    tally = Tally()
    started = time.monotonic()
    try:
        refused, how = await asyncio.to_thread(evicting_redis_refused, workdir)
        print(f"evicting redis      {'refused' if refused else 'NOT REFUSED'} ({how})")
        await asyncio.gather(*(asyncio.to_thread(g.start) for g in gateways))
        print(
            f"chaos: {n_gateways} gateways, {n_clients} clients, {seconds:.0f} s, seed {seed}, "
            f"redis {'appendfsync always' if persist else 'without persistence'}, lease {LEASE}",
            flush=True,
        )
        deadline = time.monotonic() + seconds
        keys: list[tuple[str, bytes]] = []
        counter = itertools.count(1)
        # One connection per request: a request is never sent on a connection to a dead process.
        connector = aiohttp.TCPConnector(force_close=True, limit=n_clients)
        timeout = aiohttp.ClientTimeout(total=15)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            await asyncio.gather(
                kill_gateways(gateways, tally, deadline, rng),
                restart_redis(redis, tally, deadline),
                fill_redis(redis, tally, deadline),
                *(
                    client(session, gateways, keys, counter, tally, deadline,
                           random.Random(seed * 1000 + i))
                    for i in range(n_clients)
                ),
            )  # fmt: skip
        codes = await asyncio.gather(*(asyncio.to_thread(g.stop) for g in gateways))
    finally:
        for g in gateways:
            if g.process is not None and g.process.poll() is None:
                g.kill()
        redis.close()
        await runner.cleanup()
    elapsed = time.monotonic() - started

    violations, rerun_after_kill = check(upstream, tally)
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(tally.statuses.items(), key=str))
    print(f"requests            {tally.requests} in {elapsed:.1f} s ({statuses})")
    print(f"keys                {len(keys)} sent, {len(tally.bodies)} answered 2xx")
    print(f"upstream runs       {sum(upstream.runs.values())}")
    print(f"gateway kills       {tally.kills} (SIGKILL, restarted on the same port)")
    kept = "AOF kept" if persist else "no persistence: records forgotten"
    print(f"redis restarts      {tally.redis_restarts} (SIGKILL, {kept})")
    meanwhile = ", ".join(f"{k}: {v}" for k, v in sorted(tally.while_full.items(), key=str))
    print(
        f"redis full          {tally.full_seconds:.1f} s (maxmemory, noeviction): "
        f"{tally.refused_writes} error replies; answers meanwhile {meanwhile}"
    )
    clean = list(codes).count(0)
    print(f"clean exits         {clean} of {len(codes)} gateways (SIGTERM at the end)")
    print(f"re-run after kill   {rerun_after_kill} (owner killed mid-call, lease ran out)")
    print(f"duplicates found    {len({v.split(':')[0] for v in violations})} keys")
    for line in violations[:20]:
        print(f"  VIOLATION {line}")
    failed = bool(violations) or any(codes) or not refused
    if failed:
        print(f"chaos: FAILED (gateway logs in {workdir})")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        print("chaos: OK")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--gateways", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 10_000)
    parser.add_argument(
        "--no-persistence", action="store_true", help="run Redis without AOF (expect violations)"
    )
    args = parser.parse_args()
    return asyncio.run(
        run(args.seconds, args.gateways, args.clients, args.seed, not args.no_persistence)
    )


if __name__ == "__main__":
    sys.exit(main())
