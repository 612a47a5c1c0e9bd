"""`idem-gateway --workers 2` against `--workers 1`: RPS, latency and CPU per request.

    python -m loadtest.probes workers_scaling [--seconds 5] [--rounds 3] [--quick]

Starts on loopback a redis-server, the counting upstream and two gateways (`--workers 1`,
`--workers 2`), then drives them in turns, round after round (the order flips each round so
that a noisy spell of a shared machine hits both), with wrk: new keys, and replays of 1000
keys completed just before. Each run is checked from the upstream's own counters: no key ran
twice, every new key answered 2xx ran upstream, and no replay ran upstream. CPU per request
is the whole process tree's (supervisor and workers). Prints a markdown table and exits 1 if
exactly-once failed anywhere.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from ..drive import ensure_wrk, prefill
from ..procs import cpu_seconds, start_redis, start_upstream
from .bench import (
    NEW_KEY,
    REPLAY,
    Gateway,
    Measured,
    descendants,
    drive,
    load_average,
    paired_ratios,
    summary_table,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s, 8 connections")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds, args.connections = 1.0, 1, 8
    keys = 100 if args.quick else 1000
    wrk = ensure_wrk()
    print(f"load average at start: {load_average()}", flush=True)
    rows: list[Measured] = []
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-workers-")))
        redis = start_redis(stack)
        upstream = start_upstream(stack, workdir)
        gateways = {}
        for n in (1, 2):
            gateway = Gateway(f"workers-{n}", workdir, upstream.url, redis.url, workers=n)
            stack.callback(gateway.stop)
            gateways[f"--workers {n}"] = gateway
        names = list(gateways)
        for round_ in range(args.rounds):
            order = names if round_ % 2 == 0 else names[::-1]
            for scenario in (NEW_KEY, replace(REPLAY, keys=keys)):
                for name in order:
                    gateway = gateways[name]
                    run = f"{scenario.name}-{gateway.name}-{time.monotonic_ns()}"

                    def fill(url: str = gateway.url, run: str = run) -> None:
                        prefill(url, run, keys)

                    row = drive(
                        wrk, gateway, upstream.url, scenario, run, args.seconds,
                        args.connections, name, fill if scenario.mode == "fixed" else None,
                    )  # fmt: skip
                    rows.append(row)
                    print(
                        f"round {round_ + 1} {scenario.name:8} {name}: {row.rps:7.0f} RPS "
                        f"p99 {row.p99_ms:6.1f} ms  {row.cpu_us:5.0f} µs/req  once={row.once}",
                        flush=True,
                    )
        shares = worker_shares(gateways["--workers 2"].process.pid)
    print()
    print(
        f"{args.connections} connections, wrk -t2, {args.seconds:g} s per run, {args.rounds} "
        f"rounds alternating; replay of {keys} keys"
    )
    print(summary_table(rows, names))
    print()
    print(paired_ratios(rows, "--workers 1", "--workers 2"))
    print(f"--workers 2, CPU seconds per process over the whole run: {shares}")
    print(f"load average at end: {load_average()}")
    if not all(r.once for r in rows):
        print("EXACTLY-ONCE VIOLATED")
        return 1
    return 0


def worker_shares(parent: int) -> str:
    """How the tree's CPU time split between the supervisor and each worker."""
    parts = []
    for pid in descendants(parent):
        role = "supervisor" if pid == parent else f"worker {pid}"
        parts.append(f"{role} {cpu_seconds(pid):.1f}")
    return ", ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
