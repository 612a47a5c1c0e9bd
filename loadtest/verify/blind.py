"""`python -m loadtest.verify.blind`: the checker proven able to fail.

Runs `python -m loadtest.verify --broken B` for every breakage B of `loadtest.verify.broken`
(a short run each, under the faults it needs) and checks that each run exits 1 with one of
the rules B breaks reported, and that each control (the same stalls on the unbroken
gateway) exits 0. Exits 1 if any breakage went unseen or a control failed: a checker
change that goes blind, or that fails what is right, is caught.

    python -m loadtest.verify.blind [--seconds 6] [--seed 3] [--only a,b] [--parallel 2]
                                    [--earlier PATH]

The breakages that run beside the earlier release (`premature-switch` and its control) need
its checkout (`--earlier`); without one they are skipped, and said so: there is nothing to
run them beside.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from loadtest.verify.broken import BREAKAGES, CONTROLS, Breakage
from loadtest.verify.fleet import EARLIER

ROOT = Path(__file__).resolve().parents[2]
VIOLATION = re.compile(r"^\| (\d+) \| .+ \| .+ \|$")


@dataclass
class Seen:
    breakage: str
    code: int
    rules: set[int]  # the rules the run reported broken
    seconds: float
    output: str

    @property
    def caught(self) -> bool:
        """A breakage failed the run for a rule it breaks; a control passed."""
        if self.breakage in CONTROLS:
            return self.code == 0
        expected = set(BREAKAGES[self.breakage].rules)
        return self.code == 1 and bool(self.rules & expected)


def known(name: str) -> Breakage:
    return BREAKAGES.get(name) or CONTROLS[name]


def command(
    breakage: str, seconds: float, seed: int, workdir: Path | None, earlier: Path | None = None
) -> list[str]:
    args = [
        sys.executable, "-m", "loadtest.verify", "--broken", breakage,
        "--faults", known(breakage).faults, "--routes", known(breakage).routes,
        "--seconds", str(seconds), "--seed", str(seed),
    ]  # fmt: skip
    if known(breakage).floor_2xx is not None:
        args += ["--floor-2xx", str(known(breakage).floor_2xx)]
    if known(breakage).fleet is not None:
        args += ["--fleet", str(known(breakage).fleet)]
    if earlier is not None and needs_earlier(breakage):
        args += ["--earlier", str(earlier.resolve())]
    if workdir is not None:
        args += ["--workdir", str(workdir)]
    return args


def needs_earlier(breakage: str) -> bool:
    return EARLIER in (known(breakage).fleet or "").split(",")


def run_one(
    breakage: str,
    seconds: float,
    seed: int,
    workdir: Path | None = None,
    earlier: Path | None = None,
) -> Seen:
    began = time.monotonic()
    done = subprocess.run(
        command(breakage, seconds, seed, workdir, earlier), cwd=ROOT, capture_output=True,
        text=True, timeout=seconds + 120,
    )  # fmt: skip
    output = done.stdout + done.stderr
    rules = {int(m.group(1)) for line in output.splitlines() if (m := VIOLATION.match(line))}
    return Seen(breakage, done.returncode, rules, time.monotonic() - began, output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--only", help="comma-separated breakages (default: all)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument(
        "--earlier", type=Path, metavar="PATH",
        help="a checkout of the earlier release, for the breakages beside it",
    )  # fmt: skip
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else [*BREAKAGES, *CONTROLS]
    unknown = sorted(set(names) - set(BREAKAGES) - set(CONTROLS))
    if unknown:
        print(f"unknown breakages: {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.earlier is None:
        skipped = [name for name in names if needs_earlier(name)]
        names = [name for name in names if name not in skipped]
        for name in skipped:
            print(f"blind: {name} skipped: it runs beside the earlier release (--earlier PATH)")
    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        seen = list(
            pool.map(
                lambda b: run_one(b, args.seconds, args.seed, args.workdir, args.earlier), names
            )
        )
    print("| breakage | faults | rules it breaks | exit | rules reported | caught | s |")
    print("|---|---|---|---|---|---|---|")
    for each in seen:
        b = known(each.breakage)
        print(
            f"| {each.breakage}: {b.what} | {b.faults} | {', '.join(map(str, b.rules))} | "
            f"{each.code} | {', '.join(map(str, sorted(each.rules))) or '-'} | "
            f"{'yes' if each.caught else 'NO'} | {each.seconds:.0f} |"
            if each.breakage in BREAKAGES
            else f"| {each.breakage} (control): {b.what} | {b.faults} | none | {each.code} | "
            f"{', '.join(map(str, sorted(each.rules))) or '-'} | "
            f"{'passed' if each.caught else 'FAILED'} | {each.seconds:.0f} |"
        )
    blind = [each for each in seen if not each.caught]
    for each in blind:
        print(f"\n{each.breakage} went unseen:\n{each.output[-3000:]}", file=sys.stderr)
    print("blind: every breakage caught" if not blind else f"blind: {len(blind)} unseen")
    return 1 if blind else 0


if __name__ == "__main__":
    sys.exit(main())
