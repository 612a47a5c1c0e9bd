"""Large bodies through a gateway process: memory and throughput.

    python -m loadtest.big_body [--size-mib 200] [--rounds 3] [--blob-url file:///DIR]

Starts a redis-server, an upstream answering POST /big with SIZE MiB (Content-Length), and
the gateway (`python -m gateway`) in child processes; then sends, per round,
  plain:    POST without Idempotency-Key (the pass-through path, nothing recorded),
  recorded: POST with a fresh key (streamed to the client and into the blob store),
  replay:   the same POST again (streamed back from the blob store, digest checked).
For each, it reports the transfer rate seen by the client and the gateway's peak RSS
growth: VmHWM after the transfer minus VmRSS before it, with the peak reset in between
(/proc/PID/clear_refs). The last replay is hashed on the client and compared.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

from testkit.ports import free_port
from testkit.redis_server import RedisServer

from .procs import Child, cpu_seconds

MiB = 1 << 20
BLOCK = random.Random(0).randbytes(MiB)  # the same in the upstream child


def serve_upstream(port: int, size: int) -> None:
    """The upstream: POST /big answers `size` bytes, one random MiB block repeated."""

    async def big(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        response.content_length = size
        await response.prepare(request)
        sent = 0
        while sent < size:
            piece = BLOCK[: min(MiB, size - sent)]
            await response.write(piece)
            sent += len(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/big", big)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def expected_digest(size: int) -> str:
    sha = hashlib.sha256()
    sent = 0
    while sent < size:
        piece = BLOCK[: min(MiB, size - sent)]
        sha.update(piece)
        sent += len(piece)
    return sha.hexdigest()


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


async def transfer(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], digest: bool = False
) -> tuple[int, float, str, dict[str, str]]:
    sha = hashlib.sha256()
    size = 0
    started = time.perf_counter()
    async with session.post(url, data=b"{}", headers=headers) as resp:
        assert resp.status == 200, resp.status
        async for chunk in resp.content.iter_chunked(MiB):
            size += len(chunk)
            if digest:
                sha.update(chunk)
        answer = dict(resp.headers)
    return size, time.perf_counter() - started, sha.hexdigest(), answer


async def settle(pid: int) -> None:
    """Until the process used no CPU for 100 ms (at most 5 s)."""
    deadline = time.monotonic() + 5
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now = cpu_seconds(pid)
        if now == last:
            return
        last = now


async def measure(args: argparse.Namespace, gateway: Child) -> dict[str, list]:
    pid = gateway.process.pid
    size = args.size_mib * MiB
    url = f"{gateway.url}/big"
    results: dict[str, list] = {"plain": [], "recorded": [], "replay": []}
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await transfer(session, url, {})  # warm-up: pools, imports, first allocations
        for n in range(args.rounds):
            key = {"Idempotency-Key": f"big-{n}-{time.time_ns()}"}
            for phase, headers in (("plain", {}), ("recorded", key), ("replay", key)):
                before = status_kib(pid, "VmRSS")
                reset_peak(pid)
                cpu = cpu_seconds(pid)
                got, seconds, _, answer = await transfer(session, url, headers)
                peak = status_kib(pid, "VmHWM")
                # The record is stored just after the last byte: wait for the gateway to go
                # idle so that its CPU time includes the commit.
                await settle(pid)
                cpu = cpu_seconds(pid) - cpu
                assert got == size, (phase, got)
                assert (phase == "replay") == ("Idempotent-Replayed" in answer), phase
                results[phase].append((seconds, (peak - before) / 1024, cpu))
        got, _, digest, _ = await transfer(session, url, key, digest=True)
        assert digest == expected_digest(size), "replayed body differs"
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blob-url", help="blob.url (default: file:// in a temp dir)")
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size_mib * MiB
    if args.serve_upstream:
        serve_upstream(args.serve_upstream, size)
        return 0

    with tempfile.TemporaryDirectory(prefix="big-body-") as tmp:
        work = Path(tmp)
        redis = RedisServer()
        redis.start()
        children: list[Child] = []
        try:
            port = free_port()
            upstream_args = ["--size-mib", str(args.size_mib), "--serve-upstream", str(port)]
            children.append(Child("upstream", "loadtest.big_body", port, upstream_args, work))
            config = {
                "listen": {"port": free_port()},
                "redis": {"url": redis.url},
                "loop": args.loop,
                "log_level": "warning",
                "blob": {"url": args.blob_url or f"file://{work}/blobs"},
                "routes": [{
                    "name": "big", "path_prefix": "/big", "upstream": children[0].url,
                    "max_recorded_body": f"{args.size_mib + 1}MiB", "timeouts": {"total": 600},
                }],
            }  # fmt: skip
            path = work / "gateway.yaml"
            path.write_text(yaml.safe_dump(config))
            gateway = Child(
                "gateway",
                "gateway",
                config["listen"]["port"],
                ["--config", str(path), "--workers", "1"],
                work,
            )
            children.append(gateway)
            results = asyncio.run(measure(args, gateway))
        finally:
            for child in reversed(children):
                child.stop()
            redis.close()

    print(f"{args.size_mib} MiB per transfer, {args.rounds} rounds, loop {args.loop}, "
          f"blob store {args.blob_url or 'file:// (temp dir)'}; medians:")  # fmt: skip
    plain_rate = args.size_mib / statistics.median(row[0] for row in results["plain"])
    print(
        f"{'path':<10}{'MiB/s':>8}{'vs plain':>10}{'gateway CPU s':>15}{'peak RSS growth MiB':>22}"
    )
    for phase, rows in results.items():
        rate = args.size_mib / statistics.median(row[0] for row in rows)
        growth = statistics.median(row[1] for row in rows)
        worst = max(row[1] for row in rows)
        cpu = statistics.median(row[2] for row in rows)
        print(
            f"{phase:<10}{rate:>8.0f}{rate / plain_rate:>10.2f}{cpu:>15.2f}"
            f"{growth:>14.1f} (max {worst:.1f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
