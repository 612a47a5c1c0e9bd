"""A thousand client connections at once: new keys and replays through one gateway process.

    python -m loadtest.probes many_connections [--connections 1000] [--seconds 10] [--rounds 2]
                                        [--backlog 4096 --backlog 64] [--quick]

Starts on loopback a redis-server, the counting upstream and one gateway (`--workers 1`) per
`--backlog` value (its `listen.backlog`; the default config's is 4096), after raising this
process's soft limit on open files for everything it starts. Then wrk opens all
`--connections` at once (`-t2 -cN`, keep-alive) and sends new keys, then replays of 1000
keys completed just before, `--rounds` times per gateway. The gateways are measured one
after another, the largest backlog first: a handshake dropped at a full accept queue is
retried by the client for seconds after its run, and would be counted in the next one (and
its request would reach the upstream late).

For every run it reports wrk's socket errors (connect, read, write, timeout: they must be
0), the kernel's TcpExt ListenDrops and ListenOverflows before and after (/proc/net/netstat:
counted for every socket of this network namespace, so another busy program can add to
them), and the accept queue the kernel gave each gateway socket (`ss`'s Send-Q:
min(backlog, net.core.somaxconn)). Exactly once is checked from the upstream's counters.
Exits 1 if a key ran twice or a socket error happened on the default backlog.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from ..drive import ensure_wrk, prefill
from ..procs import start_redis, start_upstream
from .bench import (
    NEW_KEY,
    REPLAY,
    Gateway,
    Measured,
    drive,
    listen_counters,
    load_average,
    quiet_listen_counters,
    raise_open_files,
    summary_table,
)

DEFAULT_BACKLOG = 4096  # gateway/config/settings.py, Listen.backlog


def accept_queue(port: int) -> str:
    """The listening socket's accept queue limit, as the kernel holds it (ss's Send-Q)."""
    out = subprocess.run(
        ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, timeout=10
    )
    fields = out.stdout.split()
    return fields[2] if len(fields) > 2 else "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backlog", type=int, action="append", help="listen.backlog, repeatable")
    parser.add_argument("--quick", action="store_true", help="200 connections, 1 round of 1 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.connections, args.seconds, args.rounds = 200, 1.0, 1
    backlogs = sorted(args.backlog or [DEFAULT_BACKLOG], reverse=True)
    # wrk's sockets, and per gateway a client and an upstream socket per connection.
    soft, hard = raise_open_files(4 * args.connections + 1024)
    somaxconn = Path("/proc/sys/net/core/somaxconn").read_text().strip()
    wrk = ensure_wrk()
    print(f"load average at start: {load_average()}", flush=True)
    rows: list[Measured] = []
    drops: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    queues = {}
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-conns-")))
        redis = start_redis(stack)
        upstream = start_upstream(stack, workdir)
        gateways = {}
        for backlog in backlogs:
            name = f"backlog {backlog}"
            gateway = Gateway(
                f"backlog-{backlog}", workdir, upstream.url, redis.url,
                listen={"backlog": backlog},
            )  # fmt: skip
            stack.callback(gateway.stop)
            gateways[name] = gateway
            queues[name] = accept_queue(gateway.port)
        names = list(gateways)
        for name in names:
            for round_ in range(args.rounds):
                for scenario in (NEW_KEY, replace(REPLAY, keys=1000)):
                    gateway = gateways[name]
                    run = f"{scenario.name}-{gateway.name}-{time.monotonic_ns()}"

                    def fill(url: str = gateway.url, run: str = run) -> None:
                        prefill(url, run, 1000)

                    before = listen_counters()
                    row = drive(
                        wrk, gateway, upstream.url, scenario, run, args.seconds,
                        args.connections, name, fill if scenario.mode == "fixed" else None,
                        lambda: quiet_listen_counters(still=0.5 if args.quick else 3.0),
                    )  # fmt: skip
                    after = listen_counters()
                    grew = (
                        after["ListenDrops"] - before["ListenDrops"],
                        after["ListenOverflows"] - before["ListenOverflows"],
                    )
                    drops.setdefault((scenario.name, name), []).append((*grew, row.stray_calls))
                    rows.append(row)
                    print(
                        f"round {round_ + 1} {scenario.name:8} {name:13}: {row.rps:6.0f} RPS "
                        f"p99 {row.p99_ms:7.1f} ms socket errors {row.socket_errors} "
                        f"drops/overflows +{grew[0]}/+{grew[1]} once={row.once} "
                        f"(upstream calls {row.upstream_calls}, late {row.stray_calls}, "
                        f"twice {row.duplicates})",
                        flush=True,
                    )
    print()
    print(
        f"wrk -t2 -c{args.connections}, {args.seconds:g} s per run, {args.rounds} rounds "
        f"per backlog, largest first; open files soft/hard {soft}/{hard}; "
        f"net.core.somaxconn {somaxconn}"
    )
    print(summary_table(rows, names))
    print()
    print(
        "| run | target | accept queue (ss Send-Q) | ListenDrops / ListenOverflows per run "
        "| late upstream calls (earlier runs' keys) |"
    )
    print("|---|---|---:|---|---|")
    for (scenario, name), grew in drops.items():
        runs = ", ".join(f"+{d}/+{o}" for d, o, _ in grew)
        late = ", ".join(str(n) for _, _, n in grew)
        print(f"| {scenario} | {name} | {queues[name]} | {runs} | {late} |")
    print(f"load average at end: {load_average()}")
    failed = False
    if not all(r.once for r in rows):
        print("EXACTLY-ONCE VIOLATED")
        failed = True
    default = [r for r in rows if r.target == f"backlog {DEFAULT_BACKLOG}"]
    if any(sum(r.socket_errors.values()) for r in default):
        print(f"SOCKET ERRORS with the default backlog ({DEFAULT_BACKLOG})")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
