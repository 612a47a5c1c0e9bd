"""The run's report: a markdown table on stdout (and in `report.md`), and a PNG of the
availability per second with the fault intervals shaded."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.telemetry.events import Event
from loadtest.verify.fleet import EARLIER
from loadtest.verify.system import FOLLOW

if TYPE_CHECKING:
    from loadtest.verify.checker import Verdict
    from loadtest.verify.harness import Run

NO_FAULT = "(no fault on)"
RULES = {
    1: "executions per key (<= 1; extra runs on release routes explained, degraded ones apart)",
    2: "every 2xx carries the key's one execution's body (one cut short, its first bytes)",
    3: "no answer of another key, tenant or payload",
    4: "no acknowledged outcome lost (no run after a 2xx; later answers for its payload the 2xx)",
    6: "no 500, no traceback, clean exits",
    7: "the same payload never refused as another (422)",
    8: "liveness: 2xx with no fault on, executions per second",
    9: "the run trusted: clients exited 0, every history line read, every fault made",
    10: "a replay is the first 2xx: its status, reason and headers, not only its body",
}


def table(result: Run) -> str:
    v, plan = result.verdict, result.plan
    kinds = Counter(f.kind for f in result.faults)
    rows = [
        ("requests", f"{v.attempts:,} in {v.span:.0f} s ({v.attempts / max(v.span, 1e-9):,.0f}/s)"),
        ("keys", f"{v.keys:,} (route, tenant, key)"),
        ("executions", f"{v.executions:,}"),
        ("routes", ", ".join(plan.routes)),
        ("topology", f"{plan.topology} Redis, {plan.gateways} gateways, lease {plan.lease}"),
        ("faults", ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"),
        ("executions per key", ", ".join(f"{n}: {c:,}" for n, c in sorted(v.runs_per_key.items()))),
        ("availability", f"{v.availability:.2%} of attempts 2xx or 409/422/503"),
        (
            "2xx with no fault on",
            f"{v.quiet_2xx[0] / max(1, v.quiet_2xx[1]):.2%} of {v.quiet_2xx[1]:,}",
        ),
        ("answers by status", ", ".join(f"{k}: {n:,}" for k, n in sorted(v.statuses.items()))),
        ("Idempotency-Outcome", ", ".join(f"{k}: {n:,}" for k, n in sorted(v.outcomes.items()))),
        ("Idempotency-Degraded", f"{v.degraded:,} (forwarded without idempotency: fail_mode open)"),
        ("keys held unknown", f"{v.held_unknown:,} (last answer 502 unknown: for an operator)"),
        (
            "held unknown, by cause",
            ", ".join(f"{k}: {n}" for k, n in v.unknown_causes.most_common()),
        ),
        (
            "extra runs explained",
            ", ".join(f"{k.words}: {n}" for k, n in v.explained.most_common()) or "0",
        ),
        *said_rows(v),
        ("seconds under 5% 2xx, per master fault", dark_seconds(result) or "no master fault"),
    ]
    if FOLLOW in plan.routes:
        rows += follower_rows(v, access_log=plan.log_level == "info")
    if v.earlier_stalls or (plan.fleet and EARLIER in plan.fleet.split(",")):
        rows.append(
            (
                "the earlier release's stall reruns",
                f"{len(v.earlier_stalls)} (forwarded without idempotency right after it stood "
                "still: its known defect, fixed in this release; apart, not violations)",
            )
        )
    for rule, name in RULES.items():
        rows.append((f"rule {rule}: {name}", f"{v.count(rule)} violation(s)"))
    for kind, why in sorted(result.skipped.items()):
        rows.append((f"skipped {kind}", why))
    lines = ["| | |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)]
    if result.faults:
        lines += [
            "",
            "| fault | times | seconds | 2xx or 409/422/503 while on | 2xx while on |",
            "|---|---|---|---|---|",
        ]
        for kind, (times, seconds, share, ok) in during_faults(result).items():
            if kind == NO_FAULT:
                lines.append(f"| {kind} | | | {share} | {ok} |")
            else:
                lines.append(f"| {kind} | {times} | {seconds:.1f} | {share} | {ok} |")
    if v.earlier_stalls:
        lines += ["", "| key | the earlier release's known defect (not a violation) |", "|---|---|"]
        lines += [f"| {x.key} | {x.what} |" for x in v.earlier_stalls[:20]]
        if len(v.earlier_stalls) > 20:
            lines.append(f"| | and {len(v.earlier_stalls) - 20} more |")
    if v.violations:
        lines += ["", "| rule | key | violation |", "|---|---|---|"]
        lines += [f"| {x.rule} | {x.key} | {x.what} |" for x in v.violations[:50]]
        if len(v.violations) > 50:
            lines.append(f"| | | and {len(v.violations) - 50} more |")
    return "\n".join(lines)


def said_rows(v: Verdict) -> list[tuple[str, str]]:
    """What the gateways logged they did (their `event` lines), counted for the run: the
    guards' work among it (the stalled-owner guard's refusals, the requests the stall
    detector held), which the run's gateway stops are made to reach."""
    said = v.said
    settled = ", ".join(f"{how}: {n:,}" for how, n in v.settled.most_common()) or "0"
    return [
        (
            "stalled-owner guard: claims not sent, half a lease old (`not-sent-late`)",
            f"{said[Event.NOT_SENT_LATE]:,}",
        ),
        (
            "stall detector: requests held through a stall, 503 (`held-through-stall`)",
            f"{said[Event.HELD_THROUGH_STALL]:,} (and {said[Event.AFTER_STALL]:,} come in "
            "less than a lease after one, `after-stall`)",
        ),
        ("lost owners' keys settled, by how (`owner-lost`)", settled),
        (
            "Redis unreachable: failed open, failed closed",
            f"{said[Event.FAILED_OPEN]:,}, {said[Event.FAILED_CLOSED]:,}",
        ),
        ("calls sent with no whole answer (`unknown-outcome`)", f"{said[Event.UNKNOWN_OUTCOME]:,}"),
    ]


def follower_rows(v: Verdict, access_log: bool) -> list[tuple[str, str]]:
    """How the followers ended (`checker.follower_end`), and those whose owner's gateway was
    killed or stopped while they were on; with the access log, the answers the gateways
    logged as followed."""

    def counts(how: Counter[str]) -> str:
        return ", ".join(f"{k}: {n:,}" for k, n in how.most_common()) or "0"

    rows = [
        ("followers (sent while the answer streams), by how they ended", counts(v.followers)),
        (
            "of them, their owner's gateway killed or stopped meanwhile",
            counts(v.followers_owner_down),
        ),
    ]
    if access_log:
        rows.append(("answers the gateways logged `followed`", f"{v.said_followed:,}"))
    return rows


MASTER_FAULTS = ("redis-kill", "redis-stop", "redis-failover")
AFTER = 5  # seconds after a fault's end still counted as its own


def dark_seconds(result: Run) -> str:
    """For each master fault in turn, the seconds from its start to AFTER seconds past its
    end in which under 5% of the attempts got a 2xx (the time the service was as good as
    down, which the 2xx-or-expected share hides)."""
    v = result.verdict
    counts = []
    for fault in sorted(result.faults, key=lambda f: f.start):
        if fault.kind not in MASTER_FAULTS:
            continue
        first, last = int(fault.start - v.began), int(fault.end - v.began) + AFTER
        dark = sum(
            1
            for second in range(first, last + 1)
            if (tally := v.per_second.get(second)) and tally[1] < 0.05 * tally[2]
        )
        counts.append(f"{fault.kind} {dark}")
    return ", ".join(counts)


def during_faults(result: Run) -> dict[str, tuple[int, float, str, str]]:
    """Per fault kind: how often, how long in all, and the availability in the seconds it
    was on (a second counts for every fault on during any part of it)."""
    v = result.verdict
    seconds: dict[str, set[int]] = {}
    spent: dict[str, float] = defaultdict(float)
    times: Counter[str] = Counter()
    for fault in result.faults:
        first, last = int(fault.start - v.began), int(fault.end - v.began)
        seconds.setdefault(fault.kind, set()).update(range(first, last + 1))
        spent[fault.kind] += fault.end - fault.start
        times[fault.kind] += 1
    faulty = set().union(*seconds.values()) if seconds else set()
    seconds[NO_FAULT] = set(v.per_second) - faulty
    found: dict[str, tuple[int, float, str, str]] = {}
    for kind, covered in sorted(seconds.items()):
        counted = [v.per_second[s] for s in covered if s in v.per_second]
        good, ok, total = (sum(c[i] for c in counted) for i in range(3))
        share = f"{good / total:.1%}" if total else "-"
        found[kind] = (times[kind], spent[kind], share, f"{ok / total:.1%}" if total else "-")
    return found


def print_table(result: Run) -> None:
    print(table(result), flush=True)


def write_report(result: Run, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(table(result) + "\n")
    plot(result, out / "availability.png")


def plot(result: Run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = result.verdict
    seconds = sorted(v.per_second)
    share = [v.per_second[s][0] / max(1, v.per_second[s][2]) * 100 for s in seconds]
    ok = [v.per_second[s][1] / max(1, v.per_second[s][2]) * 100 for s in seconds]
    rate = [v.per_second[s][2] for s in seconds]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(13, 5), sharex=True, height_ratios=(3, 1))
    colors: dict[str, Any] = {}
    palette = plt.get_cmap("tab20")
    for fault in result.faults:
        color = colors.setdefault(fault.kind, palette(len(colors) % 20))
        for axis in (top, bottom):
            axis.axvspan(
                fault.start - v.began, max(fault.end - v.began, fault.start - v.began + 0.2),
                color=color, alpha=0.35, lw=0, label=fault.kind if axis is top else None,
            )  # fmt: skip
    top.plot(seconds, share, color="black", lw=0.8, label="2xx or 409/422/503")
    top.plot(seconds, ok, color="tab:green", lw=0.6, label="2xx")
    top.set_ylabel("available %")
    top.set_ylim(-2, 102)
    bottom.plot(seconds, rate, color="tab:blue", lw=0.8)
    bottom.set_ylabel("requests/s")
    bottom.set_xlabel("seconds since start")
    handles, labels = top.get_legend_handles_labels()
    if handles:
        unique = dict(zip(labels, handles, strict=True))
        top.legend(
            unique.values(), unique.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1)
        )
    top.set_title(
        f"{v.attempts:,} requests, {len(result.faults)} faults: "
        "share of attempts answered, per second"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
