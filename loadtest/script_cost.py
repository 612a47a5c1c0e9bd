"""Redis's own CPU per state-machine script, read from `INFO commandstats`.

    python -m loadtest.script_cost [--keys 50000] [--lua DIR ...]

Starts a redis-server on loopback (the one the tests use) and, for each folder of scripts
(default: the gateway's own; name another tree's `lua/` to compare), runs for `--keys` new
keys a claim then a complete, pipelined 100 at a time as the gateway's pipeline sends them,
then a claim of each completed key (a replay's read). It prints the microseconds Redis
itself spent per call (`usec_per_call` of EVALSHA), which the gateway's CPU does not include.
It stops by itself and stops its redis-server.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import redis

from testkit.redis_server import RedisServer

BATCH = 100
LEASE_MS = 30_000
RETENTION_MS = 86_400_000
META = b'{"s":201,"h":[["Content-Type","application/json"]],"n":64,"d":"x","t":1}'
BODY = b"x" * 64


def _args(script: str, token: str) -> list[object]:
    """Each script's ARGV as the gateway sends it; the claim's as the scripts in `lua` take
    it (an earlier tree's claim took four)."""
    if script == "claim":
        return ["fp", token, LEASE_MS, int(time.time() * 1000), RETENTION_MS, "take", ""]
    return [token, "C", META, BODY, RETENTION_MS, "fp"]


def _per_call(client: redis.Redis) -> float:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec_per_call", 0.0))


def _batch(client: redis.Redis, sha: str, script: str, start: int, keys: int, token: str) -> None:
    """One pipeline of `script` calls, keys `start` on, as the gateway's pipeline sends them."""
    with client.pipeline(transaction=False) as pipe:
        for n in range(start, min(start + BATCH, keys)):
            pipe.evalsha(sha, 1, f"idem:{{k{n}}}", *_args(script, f"{token}{n}"))
        pipe.execute()


def measure(client: redis.Redis, lua: Path, keys: int) -> tuple[float, float]:
    """Redis µs per claim + complete of a new key, and per claim of a completed one."""
    claim = client.script_load((lua / "claim.lua").read_text())
    complete = client.script_load((lua / "complete.lua").read_text())
    client.flushall()
    client.config_resetstat()
    for start in range(0, keys, BATCH):
        _batch(client, claim, "claim", start, keys, "t")
        _batch(client, complete, "complete", start, keys, "t")
    new_key = _per_call(client) * 2
    client.config_resetstat()
    for start in range(0, keys, BATCH):
        _batch(client, claim, "claim", start, keys, "r")
    return new_key, _per_call(client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--lua", action="append", type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    folders = args.lua or [Path(__file__).resolve().parent.parent / "lua"]
    server = RedisServer()
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        print(f"{'scripts':40} {'new key µs':>11} {'replay µs':>10}")
        for folder in folders:
            new_key, replay = measure(client, folder, args.keys)
            print(f"{folder!s:40} {new_key:11.2f} {replay:10.2f}")
        client.close()
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
