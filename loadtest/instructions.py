"""Instructions per request of gateway trees, counted by callgrind: a measure that a shared,
noisy machine does not move.

`python -m loadtest.instructions --tree before=/path/to/old/checkout --tree after=.` starts on
loopback a counting upstream and a redis-server, then each tree's gateway (one process, the
tree first on PYTHONPATH) under `valgrind --tool=callgrind`, instrumented only once it
listens. Each round sends `--requests` new keys (then as many replays of 20 keys) over 8
keep-alive connections, the first 50 unmeasured, and reads the instructions the process ran
meanwhile (user space only: the kernel's share of a request is not counted). Two runs of
one tree agree within about 1%; CPU seconds on a busy machine vary by 5 to 15%. Valgrind
runs the gateway some 50 times slower, so a round of 400 requests takes a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from testkit.ports import free_port, wait_for_port

from .procs import start_redis, start_upstream
from .run import gateway_config

BODY = b'{"amount":100,"currency":"EUR"}'
WARM = 50  # requests before each count: connections open, caches filled
REPLAYED_KEYS = 20
_LENGTH = re.compile(rb"(?i)\r\ncontent-length: *(\d+)")


async def drive(port: int, keys: list[str], connections: int = 8) -> dict[int, int]:
    """POST /pay once per key, over `connections` keep-alive connections: the statuses."""
    codes: dict[int, int] = {}
    todo = list(reversed(keys))

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while todo:
            key = todo.pop().encode()
            head = b"POST /pay HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: %s\r\n" % key
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
            writer.write(head + BODY)
            answer = await reader.readuntil(b"\r\n\r\n")
            length = _LENGTH.search(answer)
            if length:
                await reader.readexactly(int(length.group(1)))
            status = int(answer.split(b" ", 2)[1])
            codes[status] = codes.get(status, 0) + 1
        writer.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return codes


def total_instructions(dump: Path) -> int:
    """The instructions a callgrind dump counted (its `totals:` or `summary:` line)."""
    for line in dump.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise ValueError(f"{dump} holds no totals")


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def measure(
    name: str,
    tree: str,
    redis_url: str,
    upstream_url: str,
    workdir: Path,
    requests: int,
    rounds: int,
) -> dict[str, list[float]]:
    """Instructions per request of one tree's gateway, by scenario, one value per round."""
    port = free_port()
    config = workdir / f"gateway-{name}.yaml"
    raw = gateway_config(port, upstream_url, redis_url, "uvloop", True, free_port())
    config.write_text(yaml.safe_dump(raw))
    out = workdir / f"callgrind-{name}"
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, "-m", "gateway", "--config", str(config), "--workers", "1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    with open(workdir / f"gateway-{name}.log", "wb") as log:
        process = subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=log)
    per: dict[str, list[float]] = {"new-key": [], "replay": []}
    try:
        wait_for_port(port, process, timeout=300)
        _control("-i", "on", str(process.pid))
        fixed = [f"{name}-fixed-{i}" for i in range(REPLAYED_KEYS)]
        asyncio.run(drive(port, fixed, 1))
        for round_ in range(rounds):
            tag = f"{name}-{round_}-{time.monotonic_ns()}"
            for scenario, keys in (
                ("new-key", [f"{tag}-{i}" for i in range(requests)]),
                ("replay", [fixed[i % REPLAYED_KEYS] for i in range(requests)]),
            ):
                asyncio.run(drive(port, keys[:WARM]))
                _control("-z", str(process.pid))
                codes = asyncio.run(drive(port, keys[WARM:]))
                if set(codes) != {201}:
                    raise RuntimeError(f"gateway {name} answered {codes} in {scenario}")
                _control("-d", str(process.pid))
                dumps = sorted(workdir.glob(f"{out.name}*"), key=lambda p: p.stat().st_mtime)
                count = total_instructions(dumps[-1]) / (requests - WARM)
                per[scenario].append(count)
                print(f"round {round_ + 1} {scenario:8} {name:10} {count / 1000:7.1f} k instr/req")
    finally:
        process.terminate()
        process.wait(60)
    return per


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", action="append", required=True, metavar="NAME=PATH")
    parser.add_argument("--requests", type=int, default=400, help="per round and scenario")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    trees = dict(item.split("=", 1) for item in args.tree)
    counts: dict[str, dict[str, list[float]]] = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-instr-")))
        redis = start_redis(stack)
        upstream = start_upstream(stack, workdir)
        for name, path in trees.items():
            counts[name] = measure(
                name, path, redis.url, upstream.url, workdir, args.requests, args.rounds
            )
    first = next(iter(trees))
    print(f"\n{'scenario':9} {'tree':10} {'min k':>8} {'max k':>8} {'vs ' + first:>12}")
    for scenario in ("new-key", "replay"):
        base = min(counts[first][scenario])
        for name in trees:
            values = counts[name][scenario]
            ratio = min(values) / base
            print(
                f"{scenario:9} {name:10} {min(values) / 1000:8.1f} {max(values) / 1000:8.1f} "
                f"{ratio:11.3f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
