"""What `loadtest.run` measures and prints: its rows, the table, the targets' ratios against
the bare proxy and the floors, and the seed scenario's latency plot."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import https_rows

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
