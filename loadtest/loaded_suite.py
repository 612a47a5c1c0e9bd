"""The test suite run again and again on a machine shared with other work: does it pass?

`python -m loadtest.loaded_suite [--runs 5] [--busy 2] [--log-dir DIR] [-- COMMAND ...]`
runs COMMAND (default: the README's `python -m pytest`) in the current folder `--runs` times
in a row, each beside `--busy` loops that keep a core busy (`yes > /dev/null`), started
before the run and stopped after it. It prints a line a run (its exit status, its time, the
last line of its output: pytest's summary) and the tests each failed run names, keeps each
run's whole output in DIR (`run-N.log`), and exits 1 unless every run passed. It stops by
itself: a run past `--timeout` (default 30 min) is stopped with all it started (each run is
a process group of its own), and it stops only what it started.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from testkit.procs import stop_group

DEFAULT_COMMAND = [sys.executable, "-m", "pytest"]


@dataclass(frozen=True)
class Run:
    """One run of the command: how it ended, how long it took, what it said last."""

    number: int
    returncode: int
    seconds: float
    summary: str
    failed: list[str]

    def line(self) -> str:
        minutes, seconds = divmod(round(self.seconds), 60)
        return f"run {self.number}: exit {self.returncode}, {minutes}:{seconds:02d}, {self.summary}"


def run_beside_busy_loops(
    number: int, command: list[str], busy: int, log: Path, timeout: float
) -> Run:
    """Run `command` once beside `busy` loops; its output goes to `log`. A run past `timeout`
    is stopped with all it started (its process group: pytest's workers, their servers)."""
    loops: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    timed_out = False
    try:
        for _ in range(busy):
            loops.append(subprocess.Popen(["yes"], stdout=subprocess.DEVNULL))
        with open(log, "wb") as out:
            run = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                returncode = run.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                returncode = stop_group(run)
            finally:
                if run.poll() is None:  # interrupted: stop what the run started
                    stop_group(run)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    seconds = time.monotonic() - started
    lines = log.read_text(errors="replace").splitlines()
    summary = next((line.strip("= ") for line in reversed(lines) if line.strip()), "(no output)")
    if timed_out:
        summary = f"timed out after {timeout:.0f} s; {summary}"
    failed = [found[1] for found in map(FAILED.match, lines) if found]
    return Run(number, returncode, seconds, summary, failed)


# pytest's short summary: "FAILED tests/test_x.py::test_y[a b] - why", "ERROR tests/test_x.py"
# (a captured log line reads "ERROR    logger:file.py:12 ...": not one of them).
FAILED = re.compile(r"(?:FAILED|ERROR) (\S+\.py(?:::.+?)?)(?: - .*)?$")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.loaded_suite", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside each run")
    parser.add_argument("--log-dir", type=Path, help="where each run's output is kept")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a run may take")
    parser.add_argument("command", nargs="*", help="the command to run (after --)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.busy < 0:
        parser.error("--runs must be 1 or more, --busy 0 or more")
    command = args.command or DEFAULT_COMMAND
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="idem-loaded-suite-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    beside = f"{args.runs} runs, each beside {args.busy} busy loops"
    print(f"{' '.join(command)}: {beside}; logs in {log_dir}")
    runs = []
    for number in range(1, args.runs + 1):
        run = run_beside_busy_loops(
            number, command, args.busy, log_dir / f"run-{number}.log", args.timeout
        )
        runs.append(run)
        print(run.line(), flush=True)
        for test in run.failed:
            print(f"  failed: {test}")
    passed = sum(run.returncode == 0 for run in runs)
    print(f"{passed} of {len(runs)} runs passed")
    return 0 if passed == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
