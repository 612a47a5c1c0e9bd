"""The local journal of outcomes Redis has not taken: what it holds is what a restart replays,
whatever order its writes and marks come in and whatever a full disk cuts short."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from gateway.core.record import Record
from gateway.store import journal as journal_module
from gateway.store.journal import Journal, Unstored, orphans


def outcome(key: str, body: bytes = b"{}") -> Unstored:
    return Unstored(key, f"token-{key}", "fp", Record(201, [], len(body), ""), body, 60.0)


def unstored_keys(folder: Path) -> list[str]:
    return [each.key for _, outcomes in orphans(folder) for each in outcomes]


def test_an_entry_in_its_fsync_survives_another_entry_marked_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`add` runs in a worker thread: an entry written and being fsynced (a slow disk) while
    the only other entry is marked stored must stay in the file, not be emptied with it."""
    journal = Journal(tmp_path)
    first = journal.add(outcome("first"))
    in_fsync, disk_returns = threading.Event(), threading.Event()
    fsync = journal_module.os.fsync

    def slow_fsync(fd: int) -> None:
        fsync(fd)
        in_fsync.set()
        assert disk_returns.wait(10)

    monkeypatch.setattr(journal_module.os, "fsync", slow_fsync)
    second = threading.Thread(target=journal.add, args=(outcome("second"),))
    second.start()
    assert in_fsync.wait(10)
    marked = threading.Thread(target=journal.stored, args=(first,))  # as settle runs it
    marked.start()
    disk_returns.set()
    second.join(10)
    marked.join(10)
    assert journal.depth == 1
    journal.close()  # as a SIGKILL would leave it: the file stays, its lock free
    assert unstored_keys(tmp_path) == ["second"]


def test_a_line_a_full_disk_cut_short_does_not_take_the_next_entry_with_it(
    tmp_path: Path,
) -> None:
    """A write the file-size limit cuts short (EFBIG, as ENOSPC on a full disk) fails its
    entry, and leaves no half line: the entry written once there is room again is read back
    by the next start. Run in a child process, whose file-size limit is its own."""
    child = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        sys.path[:0] = {sys.path!r}
        from tests.test_journal import outcome
        from gateway.store.journal import Journal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        journal = Journal(Path({str(tmp_path)!r}))
        journal.add(outcome("before"))
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        try:
            journal.add(outcome("cut", b"x" * 8192))
        except OSError:
            print("cut refused")
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        journal.add(outcome("after"))
        print("depth", journal.depth)
        journal.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["cut refused", "depth 2"]
    assert unstored_keys(tmp_path) == ["before", "after"]


def test_a_journal_removed_after_the_listing_is_passed_over(tmp_path: Path) -> None:
    """A starting gateway lists the journals, then opens each: one its owner removed in
    between (a clean stop) is passed over, not a failed start."""
    gone = Journal(tmp_path)
    kept = Journal(tmp_path)
    kept.add(outcome("kept"))
    kept.close()
    listed = sorted(tmp_path.glob("*.jsonl"))
    gone.close()  # empty: removed at its clean stop

    class Listing(type(tmp_path)):  # type: ignore[misc]
        def glob(self, pattern: str) -> list[Path]:  # type: ignore[override]
            return listed

    assert unstored_keys(Listing(tmp_path)) == ["kept"]
