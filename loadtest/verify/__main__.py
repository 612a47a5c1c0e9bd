"""`python -m loadtest.verify`: a run of the verification harness; exit 1 on any violation.

python -m loadtest.verify [--seconds 30] [--routes reconcile,record,release] [--each 1]
                          [--topology single|sentinel|cluster] [--out DIR]
python -m loadtest.verify --earlier PATH --fleet earlier,1 [--routes ...,open]
                                                            (a mixed fleet: `fleet`)
python -m loadtest.verify --judge RUN_FOLDER [--out DIR]    (a kept run, checked again)
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from loadtest.verify.broken import BREAKAGES, CONTROLS
from loadtest.verify.checker import Floor
from loadtest.verify.fleet import EARLIER, earlier_release, parse_fleet
from loadtest.verify.harness import Plan, judge, run
from loadtest.verify.nemesis import ALL_KINDS, default_kinds
from loadtest.verify.report import print_table, write_report
from loadtest.verify.system import ROUTES


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long clients send")
    parser.add_argument("--gateways", type=int, help="gateway processes (default: 2)")
    parser.add_argument(
        "--fleet", help="each gateway's release and record format, comma-separated: "
        "earlier (the release at --earlier), 1 or 2 (this one, redis.record_format), this "
        "(this one, its default); default: this for every gateway",
    )  # fmt: skip
    parser.add_argument(
        "--earlier", type=Path, metavar="PATH", help="a checkout of the earlier release"
    )
    parser.add_argument("--clients", type=int, default=1, help="client processes")
    parser.add_argument("--concurrency", type=int, default=32, help="operations per process")
    parser.add_argument(
        "--routes", default="reconcile,record,release",
        help=f"comma-separated, among {','.join(ROUTES)} (open: fail_mode: open)",
    )  # fmt: skip
    parser.add_argument(
        "--faults", help="fault kinds, comma-separated (none: no faults; default: every one "
        "the topology can take)",
    )  # fmt: skip
    parser.add_argument("--each", type=int, default=1, help="times each fault kind is made")
    parser.add_argument("--tracks", type=int, default=1, help="fault tracks at once (compound)")
    parser.add_argument(
        "--stretch", type=float, default=1.0, help="faults last this many times as long"
    )
    parser.add_argument("--topology", choices=("single", "sentinel", "cluster"), default="single")
    parser.add_argument("--lease", default="2s")
    parser.add_argument(
        "--claim-replicas", type=int, default=0, help="redis.claim_replicas (sentinel, cluster)"
    )
    parser.add_argument(
        "--owner-lost", choices=("release", "keep", "record"),
        help="every route's on_owner_lost (default: its on_unknown_outcome)",
    )  # fmt: skip
    parser.add_argument("--mark-sent", action="store_true", help="mark_sent: true on every route")
    parser.add_argument("--access-log", action="store_true", help="gateways log every request")
    parser.add_argument(
        "--floor-2xx", type=float, default=Floor.share_2xx,
        help="rule 8: least share of 2xx among attempts with no fault on",
    )  # fmt: skip
    parser.add_argument(
        "--floor-rate", type=float, default=Floor.rate,
        help="rule 8: least executions per second over the run",
    )  # fmt: skip
    parser.add_argument(
        "--broken", choices=sorted([*BREAKAGES, *CONTROLS]),
        help="run gateways broken on purpose in this way (the checker must fail the run)",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=int(time.time()) % 10_000)
    parser.add_argument("--out", type=Path, help="write report.md and availability.png here")
    parser.add_argument("--keep", action="store_true", help="keep the run's folder")
    parser.add_argument(
        "--judge", type=Path, metavar="RUN_FOLDER", help="check a kept run's histories again"
    )
    parser.add_argument(
        "--workdir", type=Path, help="make the run's folder in this one (default: TMPDIR)"
    )
    return parser.parse_args(argv)


def stop_on_sigterm() -> None:
    """SIGTERM (a `timeout`, a CI's cancel) unwinds like Ctrl-C: the run stops what it
    started and unmounts what it mounted."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stop_on_sigterm()
    if args.judge is not None:
        return rejudge(args.judge, args.out)
    if args.faults is None:
        kinds = default_kinds(args.topology)
    else:
        kinds = [] if args.faults == "none" else args.faults.split(",")
    unknown = sorted(set(kinds) - set(ALL_KINDS))
    if unknown:
        print(f"unknown fault kinds: {', '.join(unknown)} (known: {', '.join(ALL_KINDS)})")
        return 2
    unknown = sorted(set(args.routes.split(",")) - set(ROUTES))
    if unknown:
        print(f"unknown routes: {', '.join(unknown)} (known: {', '.join(ROUTES)})")
        return 2
    gateways = fleet_of(args)
    if isinstance(gateways, str):
        print(gateways, file=sys.stderr)
        return 2
    plan = Plan(
        seconds=args.seconds, gateways=gateways, client_procs=args.clients,
        concurrency=args.concurrency, routes=args.routes.split(","), kinds=kinds,
        each=args.each, tracks=args.tracks, stretch=args.stretch, seed=args.seed,
        topology=args.topology,
        lease=args.lease, claim_replicas=args.claim_replicas, owner_lost=args.owner_lost,
        mark_sent=args.mark_sent,
        log_level="info" if args.access_log else "warning",
        faults_given=args.faults is not None, floor_2xx=args.floor_2xx,
        floor_rate=args.floor_rate, broken=args.broken, fleet=args.fleet,
        earlier=str(args.earlier) if args.earlier else None,
    )  # fmt: skip
    # Absolute: an earlier release's gateway runs in a folder of its own.
    workdir = Path(tempfile.mkdtemp(prefix="idem-verify-", dir=args.workdir)).resolve()
    print(
        f"verify: {plan.gateways} gateways, {plan.client_procs}x{plan.concurrency} clients, "
        f"{plan.seconds:.0f} s, routes {args.routes}, {plan.topology} redis, seed {plan.seed}"
        + (f", gateways broken: {plan.broken}" if plan.broken else "")
        + (f", fleet {plan.fleet}" if plan.fleet else ""),
        flush=True,
    )
    try:
        result = asyncio.run(run(plan, workdir))
    except KeyboardInterrupt:
        print(f"verify: interrupted (what ran so far is in {workdir})", file=sys.stderr)
        return 130
    print_table(result)
    if args.out:
        write_report(result, args.out)
    failed = bool(result.verdict.violations)
    if failed or args.keep:
        print(f"verify: {'FAILED' if failed else 'OK'} (histories and logs in {workdir})")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
        print("verify: OK")
    return 1 if failed else 0


def fleet_of(args: argparse.Namespace) -> int | str:
    """The number of gateways, once `--fleet` and `--earlier` agree with it (a breakage
    that needs a fleet brings its own); else what is wrong. Sets `args.fleet` and
    `args.earlier` as the plan takes them."""
    if args.fleet is None and args.broken in BREAKAGES | CONTROLS:
        args.fleet = {**BREAKAGES, **CONTROLS}[args.broken].fleet
    if args.fleet is None:
        return 2 if args.gateways is None else int(args.gateways)
    try:
        fleet = parse_fleet(args.fleet)
    except ValueError as exc:
        return f"--fleet: {exc}"
    if args.gateways is not None and args.gateways != len(fleet):
        return f"--gateways {args.gateways}, but --fleet {args.fleet} names {len(fleet)}"
    if any(member.release == EARLIER for member in fleet):
        if args.earlier is None:
            return f"--fleet {args.fleet} runs the earlier release: give its checkout (--earlier)"
        args.earlier = args.earlier.resolve()
        try:
            print(f"verify: the earlier release at {args.earlier}: {earlier_release(args.earlier)}")
        except ValueError as exc:
            return f"--earlier: {exc}"
    return len(fleet)


def rejudge(workdir: Path, out: Path | None) -> int:
    try:
        result = judge(workdir)
    except (OSError, ValueError, TypeError) as exc:
        print(f"{workdir}: not a run's folder ({exc})", file=sys.stderr)
        return 2
    print_table(result)
    if out:
        write_report(result, out)
    return 1 if result.verdict.violations else 0


if __name__ == "__main__":
    sys.exit(main())
