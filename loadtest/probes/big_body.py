"""Large bodies through a gateway process: memory and throughput.

    python -m loadtest.probes big_body [--size-mib 200] [--rounds 3] [--blob-url file:///DIR]
    python -m loadtest.probes big_body --curve 1KiB,16KiB,256KiB,1MiB,8MiB,64MiB [--budget-mib 256]

Starts a redis-server, the counting upstream (`loadtest.upstream`: POST /big answers SIZE MiB
with its Content-Length) and the gateway (`python -m gateway`) in child processes; then
sends, per round,
  plain:    POST without Idempotency-Key (the pass-through path, nothing recorded),
  recorded: POST with a fresh key (streamed to the client and into the blob store),
  replay:   the same POST again (streamed back from the blob store, digest checked).
For each, it reports the transfer rate seen by the client and the gateway's peak RSS
growth: VmHWM after the transfer minus VmRSS before it, with the peak reset in between
(/proc/PID/clear_refs). The last replay is hashed on the client and compared.

With --curve, per body size: a series of fresh keys one after another, then each replayed
once: the median time per request and the gateway's peak RSS over each series (VmHWM, reset
before it), whether the bodies were stored inline in Redis or as files in the blob store,
and exactly once from the upstream's counters (each key ran once, no replay ran). The last
key's new-key and replay bodies are hashed and compared. Exits 1 if a key ran twice.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

from gateway.config.units import parse_size
from testkit.ports import kept_port
from testkit.redis_server import RedisServer

from ..procs import Child, cpu_seconds
from ..upstream import BLOCK, MiB
from .bench import load_average


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


async def curve(
    gateway: Child, upstream: str, blobs: Path, sizes: list[int], budget: int
) -> list[dict]:
    """Per body size: a series of new keys, each replayed once; the median time per request,
    the gateway's peak RSS over each series, where the body was stored, and exactly once
    (each new key ran once upstream, no replay did). `budget`: bytes per series, at most."""
    pid = gateway.process.pid
    rows = []
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        await transfer(session, f"{gateway.url}/big?size=1024", {})  # warm-up
        for size in sizes:
            count = max(3, min(200, budget // size))
            url = f"{gateway.url}/big?size={size}"
            keys = [f"curve-{size}-{n}-{time.time_ns()}" for n in range(count)]
            row: dict = {"size": size, "count": count}
            files = sum(1 for f in blobs.rglob("*") if f.is_file()) if blobs.exists() else 0
            for phase in ("recorded", "replay"):
                await settle(pid)
                before = status_kib(pid, "VmRSS")
                reset_peak(pid)
                times = []
                for key in keys:
                    got, seconds, digest, answer = await transfer(
                        session, url, {"Idempotency-Key": key}, digest=key == keys[-1]
                    )
                    assert got == size, (phase, size, got)
                    assert (phase == "replay") == ("Idempotent-Replayed" in answer), phase
                    if key == keys[-1]:
                        assert digest == expected_digest(size), f"{phase} body differs"
                    times.append(seconds)
                await settle(pid)  # the last record is stored after its last byte
                peak = status_kib(pid, "VmHWM")
                row[phase] = (statistics.median(times), min(times), before / 1024, peak / 1024)
                if phase == "recorded":
                    row["blobs"] = sum(1 for f in blobs.rglob("*") if f.is_file()) - files
            async with session.get(f"{upstream}/__counts") as answer:
                calls = (await answer.json())["keys"]
            row["once"] = all(calls.get(key) == 1 for key in keys)
            rows.append(row)
            print(curve_line(row), flush=True)
    return rows


def curve_line(row: dict) -> str:
    size = row["size"]
    name = f"{size >> 20} MiB" if size >= MiB else f"{size >> 10} KiB"
    where = f"blob ({row['blobs']} files)" if row["blobs"] else "inline"
    cells = [name, str(row["count"]), where]
    for phase in ("recorded", "replay"):
        median, fastest, before, peak = row[phase]
        rate = size / MiB / median
        cells += [f"{median * 1000:.2f} ({fastest * 1000:.2f})", f"{rate:.0f}"]
        cells += [f"{peak:.0f} (+{peak - before:.1f})"]
    cells.append("yes" if row["once"] else "NO")
    return "| " + " | ".join(cells) + " |"


CURVE_HEAD = (
    "| body | keys | stored | new key ms median (min) | MiB/s | peak RSS MiB (+ over RSS before) "
    "| replay ms median (min) | MiB/s | peak RSS MiB (+) | exactly once |\n"
    "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--curve",
        help="comma-separated body sizes (e.g. 1KiB,16KiB,256KiB,1MiB,8MiB,64MiB): time per "
        "request and peak RSS per size, new key and replay, instead of the --size-mib rounds",
    )
    parser.add_argument("--budget-mib", type=int, default=256, help="--curve: MiB per series")
    parser.add_argument("--quick", action="store_true", help="a small --curve, for the tests")
    parser.add_argument("--blob-url", help="blob.url (default: file:// in a temp dir)")
    parser.add_argument("--loop", default="uvloop", choices=["uvloop", "asyncio"])
    args = parser.parse_args(argv)
    if args.quick:
        args.curve, args.budget_mib = args.curve or "1KiB,256KiB,2MiB", 4
    sizes = [parse_size(part) for part in args.curve.split(",")] if args.curve else []
    size = args.size_mib * MiB
    largest = max(sizes) if sizes else size

    print(f"load average at start: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="big-body-") as tmp:
        work = Path(tmp)
        redis = RedisServer()
        redis.start()
        children: list[Child] = []
        try:
            port = kept_port()
            upstream_args = ["--port", str(port), "--big-mib", str(args.size_mib)]
            children.append(Child("upstream", "loadtest.upstream", port, upstream_args, work))
            config = {
                "listen": {"host": "127.0.0.1", "port": kept_port()},
                "redis": {"url": redis.url},
                "loop": args.loop,
                "log_level": "warning",
                "state_dir": str(work / "state"),
                "blob": {"url": args.blob_url or f"file://{work}/blobs"},
                "routes": [{
                    "name": "big", "path_prefix": "/big", "upstream": children[0].url,
                    "max_recorded_body": largest + MiB, "timeouts": {"total": 600},
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
            if sizes:
                budget = args.budget_mib * MiB
                store = args.blob_url or "file:// (temp dir)"
                print(
                    f"loop {args.loop}, blob store {store}, inline up to 64 KiB (inline_max), "
                    f"one client, keys one after another; up to {args.budget_mib} MiB or 200 "
                    "keys per size"
                )
                print(CURVE_HEAD, flush=True)
                rows = asyncio.run(curve(gateway, children[0].url, work / "blobs", sizes, budget))
            else:
                results = asyncio.run(measure(args, gateway))
        finally:
            for child in reversed(children):
                child.stop()
            redis.close()

    if sizes:
        print(f"load average at end: {load_average()}")
        return 0 if all(row["once"] for row in rows) else 1
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
