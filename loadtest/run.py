"""The load run: bare pass-through proxy vs the gateway, side by side, in one table.

`python -m loadtest.run` starts on loopback a counting upstream, a redis-server, the bare
proxy and gateways (`python -m gateway --config ...`), drives each scenario with wrk, checks
from the upstream's own counters that every key ran exactly once through the gateway, and
prints one table plus the target ratios. It stops by itself and stops its children.
"""

from __future__ import annotations

import argparse
import functools
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gateway import build
from testkit.ports import free_port

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

# The floors (`loadtest.floors`) and the one scenario each is measured in: what a request
# costs on this stack with none of the gateway's work, read against the targets.
FLOORS = {"floor-hop": ("hop", "new-key"), "floor-hop-redis": ("hop-redis", "new-key"),
          "floor-answer": ("answer", "replay"), "floor-answer-redis": ("answer-redis", "replay"),
          "floor-raw": ("raw", "replay")}  # fmt: skip


@dataclass
class Row:
    scenario: str
    target: str
    loop: str
    requests: int
    seconds: float
    codes: dict[str, int]
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]
    cpu_us: float  # the target process's user+sys CPU time per request
    percentiles: list[list[float]] = field(default_factory=list)
    duplicates: int | None = None  # keys the upstream ran more than once (None: not checked)
    upstream_keys: int = 0
    outcomes: dict[str, int] | None = None  # the gateway's own count, from its /metrics

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def count(self, *codes: str) -> int:
        return sum(n for code, n in self.codes.items() if code in codes)


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


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'scenario':9} {'target':16} {'loop':8} {'RPS':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'2xx':>7} {'409':>6} {'other':>10} {'sockerr':>7} {'CPU us/req':>10} {'once':>9}  "
        "gateway's own count (/metrics)"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        other = {c: n for c, n in r.codes.items() if not c.startswith("2") and c != "409"}
        errors = sum(r.errors.values())
        if r.duplicates is None:
            once = "-"
        elif r.target.startswith("gateway"):
            once = "yes" if r.duplicates == 0 else f"NO:{r.duplicates}"
        else:
            once = f"dup:{r.duplicates}"
        lines.append(
            f"{r.scenario:9} {r.target:16} {r.loop:8} {r.rps:7.0f} {r.p50_ms:7.1f} "
            f"{r.p99_ms:7.1f} {r.count(*[c for c in r.codes if c.startswith('2')]):7d} "
            f"{r.count('409'):6d} {json.dumps(other) if other else '-':>10} {errors:7d} "
            f"{r.cpu_us:10.0f} {once:>9}  {_short(r.outcomes)}"
        )
    return "\n".join(lines)


def _short(outcomes: dict[str, int] | None) -> str:
    """`forwarded 812 replayed 10` for the outcomes that occurred."""
    if outcomes is None:
        return "-"
    return " ".join(f"{name} {n}" for name, n in sorted(outcomes.items()) if n) or "none"


def _find(rows: list[Row], scenario: str, target: str, loop: str = "uvloop") -> Row | None:
    for r in rows:
        if (r.scenario, r.target, r.loop) == (scenario, target, loop):
            return r
    return None


def targets_report(rows: list[Row]) -> str:
    """The targets as same-run ratios of the gateway (pipelined) to the bare proxy, and how
    far the gateway stands from nginx."""
    out = []

    def check(label: str, value: float, limit: float, at_least: bool) -> None:
        met = value >= limit if at_least else value <= limit
        sign = ">=" if at_least else "<="
        out.append(
            f"{label:44} {value:5.2f}x  (target {sign} {limit}x)  {'met' if met else 'NOT met'}"
        )

    for scenario, rps_limit in (("new-key", 1.0), ("replay", 2.0)):
        gw, bare = _find(rows, scenario, "gateway"), _find(rows, scenario, "bare")
        if gw and bare:
            check(f"{scenario}: RPS vs bare", gw.rps / bare.rps, rps_limit, True)
            label = f"{scenario}: CPU per request vs bare"
            if gw.cpu_us > 0 and bare.cpu_us > 0:
                if scenario == "new-key":
                    check(label, gw.cpu_us / bare.cpu_us, 1.0, False)
                else:
                    out.append(f"{label:44} {gw.cpu_us / bare.cpu_us:5.2f}x")
            else:  # a process that did the work was not the one measured
                out.append(f"{label:44}  not measured (CPU time of 0)")
    out.extend(_floors(rows))
    out.extend(https_rows.report(functools.partial(_find, rows)))
    gw, bare = _find(rows, "seed", "gateway"), _find(rows, "seed", "bare")
    if gw and bare:
        check("seed: 2xx+409 per second vs bare", _answered(gw) / _answered(bare), 1.7, True)
    for loop in ("uvloop", "asyncio"):
        gw, bare = _find(rows, "seed", "gateway", loop), _find(rows, "seed", "bare", loop)
        if gw and bare:
            check(f"seed: p99 vs bare under {loop}", gw.p99_ms / bare.p99_ms, 1.0, False)
            out.append(f"  (bare {bare.p99_ms:.1f} ms, gateway {gw.p99_ms:.1f} ms)")
    for r in rows:
        nginx = _find(rows, r.scenario, "nginx", "-")
        if r.target == "gateway" and r.loop == "uvloop" and nginx and nginx.rps:
            cpu = f", CPU {r.cpu_us / nginx.cpu_us:.2f}x" if nginx.cpu_us > 0 else ""
            out.append(f"{r.scenario}: gateway/nginx RPS {r.rps / nginx.rps:.2f}x{cpu}")
    return "\n".join(out)


def _floors(rows: list[Row]) -> list[str]:
    """Each floor's CPU per request against the bare proxy's, beside what the gateway's
    target leaves it: a floor above that share shows the target out of reach on this stack.
    The RPS targets are CPU targets here: one process on a core of its own is CPU-bound."""
    out = []
    for name, (_, scenario) in FLOORS.items():
        floor, bare = _find(rows, scenario, name), _find(rows, scenario, "bare")
        gw = _find(rows, scenario, "gateway")
        if not (floor and bare and gw and floor.cpu_us > 0 and bare.cpu_us > 0):
            continue
        share = 1.0 if scenario == "new-key" else 0.5  # 1.0x the bare CPU; 2.0x its RPS
        out.append(
            f"{scenario}: {name} {floor.cpu_us:.0f} µs/req = {floor.cpu_us / bare.cpu_us:.2f}x "
            f"bare's (target leaves <= {share:.1f}x); the gateway's own work above it "
            f"{gw.cpu_us - floor.cpu_us:.0f} µs"
        )
    return out


def _answered(row: Row) -> float:
    """2xx and 409 answers per second: the seed scenario's useful answers."""
    return row.count(*[c for c in row.codes if c.startswith("2")], "409") / row.seconds


def plot(rows: list[Row], path: Path) -> None:
    """Latency by percentile of the seed scenario, one line per target and loop."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for r in rows:
        if r.scenario != "seed":
            continue
        points = [(p, us) for p, us in r.percentiles if p < 100]  # wrk gives 0 for the 100th
        ps = [p for p, _ in points]
        ms = [us / 1000 for _, us in points]
        ax.plot(ps, ms, marker="o", label=f"{r.target} ({r.loop})")
    ax.set_xscale("function", functions=(lambda p: -_log1m(p), lambda y: 100 - 100 * 10 ** (-y)))
    ax.set_xticks([50, 90, 99, 99.9], ["p50", "p90", "p99", "p99.9"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title("seed scenario: 200 connections, 10 requests per key, upstream 50 ms")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _log1m(p: Any) -> Any:
    import numpy as np

    return np.log10(np.clip(100 - np.asarray(p, dtype=float), 0.05, 100) / 100)


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
        port = free_port()
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
        port, admin_port = free_port(), free_port()
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
        started = Nginx(nginx, name, free_port(), self.upstream.url, self.workdir, tls)
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
