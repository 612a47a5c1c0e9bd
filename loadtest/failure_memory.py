"""The gateway's memory while its upstream is down and clients retry large bodies.

`python -m loadtest.failure_memory [--requests 3000] [--body-mib 1] [--concurrency 50]`
starts on loopback a redis-server and a gateway process (`--workers 1`) whose upstream is
either a closed port (`--upstream dead`: every call fails to connect) or a server that cuts
every connection once it has the request (`--upstream reset`), sends the requests with fresh
keys and random bodies, and prints the gateway's RSS before, its peak (VmHWM) and after, for
`--rounds` rounds of requests. Every answer must be a 502. It stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import aiohttp
import yaml

from testkit.ports import free_port, wait_for_port

from .drive import gateway_config
from .procs import start_redis

# A server that reads a request's head and cuts the connection: the call was sent, its
# outcome unknown.
RESETTING = """
import asyncio, sys
async def cut(reader, writer):
    await reader.readuntil(b"\\r\\n\\r\\n")
    writer.transport.abort()
async def main():
    server = await asyncio.start_server(cut, "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()
asyncio.run(main())
"""


def memory_mib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (the peak) of a process, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) // 1024
    return fields


async def send(url: str, requests: int, body: bytes, concurrency: int, run: str) -> Counter[int]:
    statuses: Counter[int] = Counter()
    gate = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> None:
            async with gate:
                key = {"Idempotency-Key": f"{run}-{i}"}
                async with session.post(f"{url}/pay", data=body, headers=key) as answer:
                    await answer.read()
                    statuses[answer.status] += 1

        await asyncio.gather(*(one(i) for i in range(requests)))
    return statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--body-mib", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--upstream", choices=("dead", "reset"), default="dead")
    args = parser.parse_args(argv)
    body_size = int(args.body_mib * (1 << 20))
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-mem-")))
        redis = start_redis(stack)
        upstream_port = free_port()
        if args.upstream == "reset":
            cutter = subprocess.Popen([sys.executable, "-c", RESETTING, str(upstream_port)])
            stack.callback(cutter.kill)
            wait_for_port(upstream_port, cutter)
        port = free_port()
        config = gateway_config(
            port, f"http://127.0.0.1:{upstream_port}", redis.url, "uvloop", True, free_port()
        )
        config["routes"][0]["max_request_body"] = body_size + 1
        (workdir / "gateway.yaml").write_text(yaml.safe_dump(config))
        with open(workdir / "gateway.log", "wb") as log:
            gateway = subprocess.Popen(
                [sys.executable, "-m", "gateway", "--config", str(workdir / "gateway.yaml"),
                 "--workers", "1"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        stack.callback(gateway.terminate)
        wait_for_port(port, gateway)
        print(f"upstream {args.upstream}, {args.requests} requests a round of "
              f"{args.body_mib} MiB bodies, {args.concurrency} at once")  # fmt: skip
        print(f"gateway RSS at start: {memory_mib(gateway.pid)['VmRSS']} MiB")
        for round_ in range(args.rounds):
            body = os.urandom(body_size)
            run = f"r{round_}-{time.monotonic_ns()}"
            statuses = asyncio.run(
                send(f"http://127.0.0.1:{port}", args.requests, body, args.concurrency, run)
            )
            mem = memory_mib(gateway.pid)
            print(f"round {round_ + 1}: answers {dict(statuses)}, RSS {mem['VmRSS']} MiB, "
                  f"peak so far {mem['VmHWM']} MiB")  # fmt: skip
            if set(statuses) != {502}:
                print("unexpected answers: every call should have failed with 502")
                return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
