"""`loadtest.loaded_suite`: each run beside the busy loops it asked for, the loops gone after
it, and a failed run named with the tests it failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.loaded_suite import main

# What a run sees: how many busy loops its parent (the harness) runs beside it.
COUNT_LOOPS = """
import os, pathlib
parent = os.getppid()
loops = 0
for stat in pathlib.Path('/proc').glob('[0-9]*/stat'):
    try:
        fields = stat.read_text().rsplit(')', 1)
    except OSError:
        continue
    if fields[0].endswith('(yes') and int(fields[1].split()[1]) == parent:
        loops += 1
print(f'{loops} loops beside this run')
"""


def loops_beside_this_test() -> str:
    """What a process this test starts sees: the busy loops left beside it."""
    done = subprocess.run(
        [sys.executable, "-c", COUNT_LOOPS], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_each_run_has_its_busy_loops_and_none_outlive_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--runs", "2", "--busy", "2", "--log-dir", str(tmp_path), "--"]
    assert main([*argv, sys.executable, "-c", COUNT_LOOPS]) == 0
    out = capsys.readouterr().out
    assert out.count("exit 0") == 2 and out.count("2 loops beside this run") == 2
    assert out.endswith("2 of 2 runs passed\n")
    assert (tmp_path / "run-2.log").read_text() == "2 loops beside this run\n"
    assert loops_beside_this_test() == "0 loops beside this run\n"


def test_a_failed_run_is_named_with_its_tests_and_the_exit_is_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fails = "import sys; print('FAILED tests/test_x.py::test_y - AssertionError'); sys.exit(1)"
    argv = ["--runs", "1", "--busy", "0", "--log-dir", str(tmp_path), "--"]
    assert main([*argv, sys.executable, "-c", fails]) == 1
    out = capsys.readouterr().out
    assert "run 1: exit 1," in out and "  failed: tests/test_x.py::test_y\n" in out
    assert out.endswith("0 of 1 runs passed\n")


# A run that starts a process of its own and outlives its timeout.
STARTS_AND_HANGS = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_run_past_its_timeout_is_stopped_with_what_it_started(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--runs", "1", "--busy", "1", "--timeout", "2", "--log-dir", str(tmp_path), "--"]
    assert main([*argv, sys.executable, "-c", STARTS_AND_HANGS]) == 1
    out = capsys.readouterr().out
    assert "run 1: exit -15," in out and "timed out after 2 s" in out
    child = int((tmp_path / "run-1.log").read_text().split()[0])
    assert not Path(f"/proc/{child}").exists(), "the run's own child was left running"
    assert loops_beside_this_test() == "0 loops beside this run\n"


def test_failed_tests_are_read_from_the_summary_not_from_captured_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    said = [
        "ERROR    gateway.store:store.py:12 Redis refused",
        "FAILED tests/test_x.py::test_y[a b] - AssertionError: no",
        "ERROR tests/test_z.py - ImportError: gone",
    ]
    script = f"import sys; print({chr(10).join(said)!r}); sys.exit(1)"
    argv = ["--runs", "1", "--busy", "0", "--log-dir", str(tmp_path), "--"]
    assert main([*argv, sys.executable, "-c", script]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if "failed:" in line]
    assert failed == ["  failed: tests/test_x.py::test_y[a b]", "  failed: tests/test_z.py"]
