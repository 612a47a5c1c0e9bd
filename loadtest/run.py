"""The load run: bare pass-through proxy vs the gateway, side by side, in one table.

`python -m loadtest.run` starts on loopback a counting upstream, a redis-server, the bare
proxy and gateways (`python -m gateway --config ...`), drives each scenario with wrk, checks
from the upstream's own counters that every key ran exactly once through the gateway, and
prints one table plus the target ratios. It stops by itself and stops its children.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import yaml

from gateway import build
from testkit.ports import kept_port

from . import https_rows
from .drive import (
    SCENARIOS,
    Scenario,
    ensure_wrk,
    find_duplicates,
    gateway_config,
    get_json,
    prefill,
    run_wrk,
    settle,
)
from .nginx import Nginx, find_nginx
from .procs import Child, start_redis
from .run_report import FLOORS, Row, format_table, plot, targets_report

_OUTCOME = re.compile(r'^idem_requests_total\{[^}]*outcome="([a-z_]+)"[^}]*\} ([0-9.e+]+)$')


def server_outcomes(admin_url: str) -> Counter[str]:
    """The gateway's requests by outcome so far, from its Prometheus metrics."""
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        match = _OUTCOME.match(line)
        if match:
            counts[match.group(1)] += int(float(match.group(2)))
    return counts


def measure(
    wrk: str,
    scenario: Scenario,
    child: Child | Nginx,
    target: str,
    loop: str,
    upstream: str,
    seconds: float,
    scale: float,
    profile: Path | None = None,
) -> Row:
    run = f"{scenario.name}-{child.name}-{time.monotonic_ns()}"
    get_json(f"{upstream}/__reset?sleep_ms={scenario.sleep_ms}", data=b"")
    checked = scenario.idempotent and target.startswith("gateway")
    keys = max(10, int(scenario.keys * scale))
    if scenario.mode == "fixed" and checked:
        prefill(child.url, run, keys)
    scenario_run = Scenario(**{**scenario.__dict__, "keys": keys})
    connections = max(4, int(scenario.connections * scale))
    spy = None
    if profile is not None and target in ("gateway", "bare") and loop == "uvloop":
        profile.mkdir(parents=True, exist_ok=True)
        name, pid, duration = f"{scenario.name}-{target}", child.process.pid, round(seconds)
        # py-spy sees no frame in compiled modules: their native code is read with perf.
        command = (
            ["perf", "record", "-F", "999", "-p", str(pid), "-o", str(profile / f"{name}.data"),
             "--", "sleep", str(max(1, duration))]
            if build.kind() == "compiled"
            else ["py-spy", "record", "--nonblocking", "-r", "250", "-f", "raw", "-p", str(pid),
                  "-d", str(max(1, duration)), "-o", str(profile / f"{name}.txt")]
        )  # fmt: skip
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    admin = child.admin_url
    before = server_outcomes(admin) if admin else None
    cpu_before = child.cpu()
    result = run_wrk(wrk, child.url, scenario_run, run, seconds, connections)
    cpu_after = child.cpu()
    if spy is not None:
        spy.wait(timeout=30)
    counts = settle(upstream)
    outcomes = None
    if admin and before is not None:
        outcomes = dict(server_outcomes(admin) - before)
    duplicates = len(find_duplicates(counts["keys"])) if scenario.idempotent else None
    percentiles = result["percentiles"]
    by_p = {p: us for p, us in percentiles}
    requests = max(1, result["requests"])
    return Row(
        scenario=scenario.name, target=target, loop=loop, requests=result["requests"],
        seconds=result["duration_us"] / 1e6, codes=result["codes"],
        p50_ms=by_p[50] / 1000, p99_ms=by_p[99] / 1000, errors=result["errors"],
        cpu_us=(cpu_after - cpu_before) * 1e6 / requests, percentiles=percentiles,
        duplicates=duplicates,
        upstream_keys=len(counts["keys"]), outcomes=outcomes,
    )  # fmt: skip


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    parser.add_argument("--quick", action="store_true", help="a tiny run: 1 s, few connections")
    parser.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    parser.add_argument("--out", type=Path, help="folder for results.json (default: temp)")
    parser.add_argument("--plot", type=Path, help="write the seed scenario's latency PNG here")
    parser.add_argument("--no-claim-bench", action="store_true")
    parser.add_argument(
        "--no-https", action="store_true", help="leave out the https rows (gateway and nginx)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="profile the pipelined gateway and the bare proxy into this folder: py-spy's raw"
        " stacks (pure build), perf's samples (compiled build: `perf report -i F --sort dso,sym`)",
    )
    return parser.parse_args(argv)


Target = tuple[str, str, Child | Nginx]  # its name in the table, its loop, its process


class Targets:
    """The run's processes on loopback, each stopped when `stack` closes: the counting
    upstream and a redis-server first, then the targets the scenarios drive."""

    def __init__(self, stack: ExitStack, workdir: Path) -> None:
        self.stack, self.workdir = stack, workdir
        self.redis = start_redis(stack)
        self.upstream = self.child("upstream", "loadtest.upstream", ["--port", "{port}"])

    def child(self, name: str, module: str, args: list[str]) -> Child:
        port = kept_port()
        started = Child(
            name, module, port, [a.replace("{port}", str(port)) for a in args], self.workdir
        )
        self.stack.callback(started.stop)
        return started

    def bare(self, name: str, *extra: str) -> Child:
        return self.child(
            name,
            "loadtest.bare_proxy",
            ["--port", "{port}", "--upstream", self.upstream.url, *extra],
        )

    def gateway(
        self, name: str, loop: str, pipeline: bool, tls: tuple[str, str] | None = None
    ) -> Child:
        port, admin_port = kept_port(), kept_port()
        config = self.workdir / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                gateway_config(
                    port, self.upstream.url, self.redis.url, loop, pipeline, admin_port, tls
                )
            )
        )
        # One process, like the bare proxy: CPU and RSS are read from this very PID.
        started = Child(
            name, "gateway", port, ["--config", str(config), "--workers", "1"], self.workdir
        )
        self.stack.callback(started.stop)
        started.admin_url = f"http://127.0.0.1:{admin_port}"
        if tls is not None:
            started.scheme = "https"
        return started

    def floor(self, name: str, kind: str) -> Child:
        return self.child(
            name, "loadtest.floors",
            ["--kind", kind, "--port", "{port}", "--upstream", self.upstream.url,
             "--redis", self.redis.url],
        )  # fmt: skip

    def nginx(self, nginx: str, name: str, tls: tuple[str, str] | None = None) -> Nginx:
        started = Nginx(nginx, name, kept_port(), self.upstream.url, self.workdir, tls)
        self.stack.callback(started.stop)
        return started


def start_targets(started: Targets, args: argparse.Namespace, wanted: set[str]) -> list[Target]:
    """The bare proxy, the gateways, the floors of the scenarios wanted and nginx (when it is
    installed), https rows beside them unless `--no-https`, and the asyncio loop's rows
    unless `--quick`."""
    targets: list[Target] = [
        ("bare", "uvloop", started.bare("bare")),
        ("gateway", "uvloop", started.gateway("gateway", "uvloop", True)),
        ("gateway-nopipe", "uvloop", started.gateway("gateway-nopipe", "uvloop", False)),
    ]
    https = None
    if wanted & set(https_rows.SCENARIOS) and not args.no_https:
        https = https_rows.certificate(started.workdir / "tls")
        targets.append(
            ("gateway-https", "uvloop", started.gateway("gateway-https", "uvloop", True, https))
        )
    for name, (kind, scenario_name) in FLOORS.items():
        if scenario_name in wanted:
            targets.append((name, "uvloop", started.floor(name, kind)))
    nginx = find_nginx()
    if nginx is not None:
        targets.append(("nginx", "-", started.nginx(nginx, "nginx")))
        if https is not None:
            targets.append(("nginx-https", "-", started.nginx(nginx, "nginx-https", https)))
    else:
        print("no nginx on PATH (apt-get install nginx-light): its rows are left out")
    if not args.quick:
        targets += [
            ("bare", "asyncio", started.bare("bare-asyncio", "--loop", "asyncio")),
            ("gateway", "asyncio", started.gateway("gateway-asyncio", "asyncio", True)),
        ]
    return targets


def measure_all(
    wrk: str, targets: list[Target], upstream: str, args: argparse.Namespace, wanted: set[str]
) -> list[Row]:
    """Each scenario wanted against each of its targets, a row printed as it is measured."""
    scale = 0.1 if args.quick else 1.0
    seconds = 1.0 if args.quick else args.duration
    rows: list[Row] = []
    for scenario in SCENARIOS:
        if scenario.name not in wanted:
            continue
        for target, loop, proc in targets:
            if loop not in ("uvloop", "-") and not scenario.extra_loops:
                continue
            if target in FLOORS and FLOORS[target][1] != scenario.name:
                continue
            if target in https_rows.TARGETS and scenario.name not in https_rows.SCENARIOS:
                continue
            row = measure(wrk, scenario, proc, target, loop, upstream, seconds, scale, args.profile)
            rows.append(row)
            print(format_table([row]).splitlines()[-1], flush=True)
    return rows


def report(rows: list[Row], claims: list[str], plot_to: Path | None) -> int:
    """The table, the targets' ratios and the claim benchmark; 1 when a gateway ran a key
    more than once."""
    print()
    print(f"gateway build: {build.describe()}")
    print(format_table(rows))
    print()
    print(targets_report(rows))
    for line in claims:
        print(line)
    if plot_to:
        plot(rows, plot_to)
    failed = [r for r in rows if r.target.startswith("gateway") and r.duplicates]
    if failed:
        print("EXACTLY-ONCE VIOLATED:", ", ".join(f"{r.scenario}/{r.target}" for r in failed))
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    wanted = set(args.scenarios.split(","))
    wrk = ensure_wrk()
    with ExitStack() as stack:
        # With --out, the children's logs and configs stay there too.
        out = args.out or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="idem-")))
        out.mkdir(parents=True, exist_ok=True)
        started = Targets(stack, out)
        targets = start_targets(started, args, wanted)
        rows = measure_all(wrk, targets, started.upstream.url, args, wanted)
        claims = []
        if not args.no_claim_bench:
            claims = claim_benchmark(started.redis.url, 2_000 if args.quick else 20_000)
        results = {
            "rows": [r.__dict__ for r in rows],
            "claims": claims,
            "machine": machine(),
            "build": build.describe(),  # the gateway children import the same package
        }
        (out / "results.json").write_text(json.dumps(results, indent=1))
    return report(rows, claims, args.plot)


def claim_benchmark(url: str, claims: int) -> list[str]:
    """The claim as Lua and as WATCH/MULTI/EXEC, in a child process of its own."""
    out = subprocess.run(
        [sys.executable, "-m", "loadtest.probes", "claim_bench", "--url", url,
         "--claims", str(claims)],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return [
        "",
        "claim micro-benchmark (200 concurrent, 10 claims per key):",
        *out.stdout.splitlines(),
    ]


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores, {cpu}, Python {sys.version.split()[0]}"


if __name__ == "__main__":
    sys.exit(main())
