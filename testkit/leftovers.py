"""A pytest plugin (`-p testkit.leftovers`): a test run leaves no process and no file behind.

The run gets a temp folder of its own (TMPDIR, so every child process uses it too) and a mark
in the environment that its children inherit. When the last test is done, any process that
still carries the mark, any file left in the run's temp folder outside pytest's own tmp_path
tree, and a state folder made in the home directory are reported as an error of the run, and
those processes are stopped (by their PID: they are the run's own). A clean run removes its
temp folder entirely.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

RUN_MARK = "IDEM_TEST_RUN"
# Where a gateway would put its state with no IDEM_STATE_DIR (gateway.config.state).
HOME_STATE = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
HOME_STATE = HOME_STATE / "idem-gateway"
# Children stopping as the run ends (a redis-server after its gateway) get this long.
SETTLE_SECONDS = 3.0


class _Run:
    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.folder = Path(tempfile.mkdtemp(prefix="idem-tests-"))
        self.home_state_existed = HOME_STATE.exists()
        self.saved_tmpdir = os.environ.get("TMPDIR")
        self.clean = False


_run: _Run | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _run
    _run = _Run()
    os.environ["TMPDIR"] = str(_run.folder)
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    os.environ[RUN_MARK] = _run.token


@pytest.fixture(scope="session", autouse=True)
def leaves_nothing_behind() -> Iterator[None]:
    """Set up first, so torn down last: after every other fixture has stopped its servers."""
    yield
    assert _run is not None
    problems = [f"process {pid} ({name}) still runs" for pid, name in _stray_processes(_run)]
    problems += [f"{path} was left behind" for path in _stray_files(_run)]
    _run.clean = not problems
    assert not problems, "the test run left things behind: " + "; ".join(problems)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _run is None:
        return
    if _run.saved_tmpdir is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = _run.saved_tmpdir
    tempfile.tempdir = None
    if _run.clean or _workers_left_nothing(config, _run):
        shutil.rmtree(_run.folder, ignore_errors=True)


def _workers_left_nothing(config: pytest.Config, run: _Run) -> bool:
    """Under pytest-xdist the tests run in worker processes, each a run of its own in a folder
    inside this one, which it removes when clean: this process, which ran no test, removes
    its own once none is left."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("dsession"):
        return False  # a worker, or a run without workers
    return not any(path.name.startswith("idem-tests-") for path in run.folder.iterdir())


def _stray_processes(run: _Run) -> list[tuple[int, str]]:
    """Processes that carry the run's mark, once they had SETTLE_SECONDS to stop; each one
    found is stopped with SIGKILL."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while (found := _marked(run.token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, _ in found:
        with contextlib.suppress(OSError):  # it may have gone in the meantime
            os.kill(pid, signal.SIGKILL)
    return found


def _marked(token: str) -> list[tuple[int, str]]:
    mark = f"{RUN_MARK}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] == "Z":
            continue  # it has exited; its parent has not reaped it yet
        if mark in environ.split(b"\0"):
            found.append((int(entry.name), stat[stat.index("(") + 1 : stat.rindex(")")]))
    return found


def _stray_files(run: _Run) -> list[Path]:
    left = [p for p in run.folder.iterdir() if not p.name.startswith("pytest-of-")]
    if not run.home_state_existed and HOME_STATE.exists():
        left.append(HOME_STATE)
    return sorted(left)
