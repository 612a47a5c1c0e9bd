"""Outcomes that ran upstream but that Redis has not taken yet, kept on local disk.

One append-only file per gateway process in `state_dir/journal/`, each line an entry or the
mark that an entry was stored; every write is fsynced before the gateway goes on. A process
holds an exclusive lock on its own file while it lives, so a starting gateway replays into
Redis exactly the files whose writers are gone (a SIGKILL, a crash, a host restart), then
removes them.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import itertools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from gateway.core.record import Record


@dataclass(frozen=True, slots=True)
class Unstored:
    """What `Store.complete` needs to store one outcome."""

    key: str
    token: str
    fingerprint: str
    record: Record
    body: bytes
    retention: float
    lost: bytes = b""  # a taken-over key's lost owner's token (`ClaimResult.lost`)

    def encode(self, entry: int) -> bytes:
        return orjson.dumps(
            {
                "id": entry,
                "key": self.key,
                "token": self.token,
                "fp": self.fingerprint,
                "record": self.record.encode().decode(),
                "body": base64.b64encode(self.body).decode(),
                "retention": self.retention,
                "lost": self.lost.decode("latin-1"),
            }
        )

    @classmethod
    def decode(cls, raw: dict[str, object]) -> Unstored:
        return cls(
            key=str(raw["key"]),
            token=str(raw["token"]),
            fingerprint=str(raw["fp"]),
            record=Record.decode(str(raw["record"]).encode()),
            body=base64.b64decode(str(raw["body"])),
            retention=float(str(raw["retention"])),
            lost=str(raw.get("lost", "")).encode("latin-1"),
        )


class Journal:
    """This process's journal file, locked while it lives."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.folder = folder
        self.path = folder / f"{os.getpid()}-{os.urandom(4).hex()}.jsonl"
        # Unbuffered: a write that fails leaves no bytes pending to reach the file later.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise
        self._ids = itertools.count(1)
        self.depth = 0  # entries being written or written, and not yet marked stored
        # `add` and `stored` run in worker threads, one at a time: the file is emptied only
        # when no entry is unstored, nor half way through its write and fsync.
        self._lock = threading.Lock()
        self._unstored: dict[int, tuple[str, float]] = {}  # entry -> record key, since

    def add(self, outcome: Unstored) -> int:
        """Write `outcome` and fsync it (blocking: run it in a thread); its entry number."""
        entry = next(self._ids)
        line = outcome.encode(entry) + b"\n"
        with self._lock:
            self.depth += 1
            try:
                self._append(line, sync=True)
            except BaseException:
                self.depth -= 1
                raise
            self._unstored[entry] = (outcome.key, time.time())
        return entry

    def stored(self, entry: int) -> None:
        """Mark an entry stored (blocking: run it in a thread). Not fsynced, and a mark that
        cannot be written is left out: an entry replayed twice is stored once (the same
        token completes the same record again)."""
        with self._lock:
            self._unstored.pop(entry, None)
            if self._fd < 0:
                return  # closed (a store finished after the drain): the next start replays it
            with contextlib.suppress(OSError):
                self._append(orjson.dumps({"done": entry}) + b"\n", sync=False)
            self.depth -= 1
            if self.depth == 0:
                os.ftruncate(self._fd, 0)

    def unstored(self) -> list[tuple[str, float]]:
        """The record key of each entry not marked stored yet, and since when."""
        with self._lock:
            return list(self._unstored.values())

    def _append(self, line: bytes, sync: bool) -> None:
        """Write a whole line, or nothing: a line cut short by a full disk is taken back, so
        that the next one does not follow a half line and become unreadable with it."""
        if self._fd < 0:
            raise OSError("the journal is closed")
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
            if sync:
                os.fsync(self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise

    def close(self) -> None:
        """Close; the file stays if entries are still unstored (the next start replays it).
        A closed journal writes nothing more: its file number may be another file's now."""
        with self._lock:
            fd, self._fd = self._fd, -1
            if fd < 0:
                return
            os.close(fd)
            if self.depth == 0:
                self.path.unlink(missing_ok=True)


def orphans(folder: Path) -> list[tuple[Path, list[Unstored]]]:
    """The unstored outcomes of journal files whose writers are gone (their lock is free)."""
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        try:
            file = open(path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            continue  # removed since the listing: its owner stopped cleanly, or was replayed
        with file:
            try:
                fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live gateway's own journal
            found.append((path, _unstored(file.read())))
    return found


def _unstored(data: bytes) -> list[Unstored]:
    entries: dict[int, dict[str, object]] = {}
    for line in data.splitlines():
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # cut short by the crash: that outcome was never acknowledged
        if "done" in raw:
            entries.pop(raw["done"], None)
        else:
            entries[raw["id"]] = raw
    return [Unstored.decode(raw) for raw in entries.values()]
