"""The test run's own guard (testkit/leftovers.py, on for every run by pyproject's addopts):
a run that leaves a process or a file behind fails, and a clean run leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

LEAKY = """
import subprocess, sys, tempfile
from pathlib import Path

def test_leaves_a_file_and_a_process():
    Path(tempfile.gettempdir(), "left-behind.txt").write_text("x")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path({pid_file!r}).write_text(str(child.pid))
"""

TIDY = """
import subprocess, sys, tempfile
from pathlib import Path

def test_cleans_up():
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "f").write_text("x")
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


def _run_pytest(test_file: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "testkit.leftovers", "-p", "no:cacheprovider",
         "-c", os.devnull, "--rootdir", str(test_file.parent), str(test_file)],
        capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def test_a_run_that_leaves_a_process_and_a_file_fails_and_names_them(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    test_file = tmp_path / "leaky" / "test_leaky.py"
    test_file.parent.mkdir()
    test_file.write_text(LEAKY.format(pid_file=str(pid_file)))
    result = _run_pytest(test_file, tmp_path / "tmp")
    pid = int(pid_file.read_text())
    try:
        assert result.returncode != 0, result.stdout
        assert f"process {pid} (python" in result.stdout
        assert "left-behind.txt was left behind" in result.stdout
        assert not _alive(pid), "the guard stops the process it found"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_clean_run_passes_and_removes_its_temp_folder(tmp_path: Path) -> None:
    test_file = tmp_path / "tidy" / "test_tidy.py"
    test_file.parent.mkdir()
    test_file.write_text(TIDY)
    result = _run_pytest(test_file, tmp_path / "tmp")
    assert result.returncode == 0, result.stdout
    assert list((tmp_path / "tmp").iterdir()) == []
