"""Outcomes that ran upstream but that Redis has not taken yet, kept on local disk.

One append-only file per gateway process in `state_dir/journal/`, each line an entry or the
mark that an entry was stored; every write is fsynced before the gateway goes on. A process
holds an exclusive lock on its own file while it lives, so a starting gateway replays into
Redis exactly the files whose writers are gone (a SIGKILL, a crash, a host restart), then
removes them.
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

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
        )


class Journal:
    """This process's journal file, locked while it lives."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.folder = folder
        self.path = folder / f"{os.getpid()}-{os.urandom(4).hex()}.jsonl"
        self._file: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - open for our lifetime
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._ids = itertools.count(1)
        self.depth = 0  # entries written and not yet marked stored

    def add(self, outcome: Unstored) -> int:
        """Write `outcome` and fsync it (blocking: run it in a thread); its entry number."""
        entry = next(self._ids)
        self._append(outcome.encode(entry))
        self.depth += 1
        return entry

    def stored(self, entry: int) -> None:
        """Mark an entry stored. Not fsynced: an entry replayed twice is stored once (the
        same token completes the same record again)."""
        self._file.write(orjson.dumps({"done": entry}) + b"\n")
        self._file.flush()
        self.depth -= 1
        if self.depth == 0:
            self._file.truncate(0)

    def _append(self, line: bytes) -> None:
        self._file.write(line + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close; the file stays if entries are still unstored (the next start replays it)."""
        empty = self.depth == 0
        self._file.close()
        if empty:
            self.path.unlink(missing_ok=True)


def orphans(folder: Path) -> list[tuple[Path, list[Unstored]]]:
    """The unstored outcomes of journal files whose writers are gone (their lock is free)."""
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, "rb") as file:
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
