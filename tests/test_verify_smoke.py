"""A smoke run of `python -m loadtest.verify`: a few thousand requests through two gateways
while every fault of the nemesis is made once; any violation of the checker fails it, and
so does a stall guard with nothing to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.verify.nemesis import default_kinds

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_every_fault_once_and_no_violation(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "loadtest.verify", "--seconds", "25", "--seed", "24",
         "--concurrency", "24", "--workdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    report = out.stdout + out.stderr
    assert out.returncode == 0, report
    faults = next(line for line in out.stdout.splitlines() if line.startswith("| faults |"))
    for kind in default_kinds("single"):
        assert f"{kind} 1" in faults or f"| skipped {kind} |" in out.stdout, report
    requests = next(line for line in out.stdout.splitlines() if line.startswith("| requests |"))
    assert int(requests.split("|")[2].split()[0].replace(",", "")) >= 2000, report
    # Its one gateway-stop lands with claims answered and unsent, and calls unanswered:
    # each stall guard has work, counted by the report from the gateways' events.
    for guard in ("(`not-sent-late`)", "(`held-through-stall`)"):
        row = next(line for line in out.stdout.splitlines() if guard in line)
        assert int(row.split("|")[2].split()[0].replace(",", "")) > 0, report
    assert "verify: OK" in out.stdout
