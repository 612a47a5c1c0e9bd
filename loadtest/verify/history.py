"""The two histories the checker reads: every client attempt and every upstream execution.

Both are tab-separated lines, one event each, written as they happen and read back whole.
Times are wall-clock seconds (`time.time()`), shared by every process on the host.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple


def digest(data: bytes) -> str:
    """A short digest of bytes (payloads and answer bodies), the same on every side."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


# Attempt statuses that are no HTTP answer.
REFUSED = 0  # the connection was refused: nothing was sent
CUT = -1  # the connection broke after the request went out (the gateway died, say)
TIMED_OUT = -2  # the client gave up waiting


class Attempt(NamedTuple):
    """One request a client sent and what came back."""

    attempt: str  # unique; sent as X-Attempt, which the upstream logs
    op: str  # the client operation it belongs to (first try, retries, duplicates)
    kind: str  # first, retry, dup (a concurrent duplicate), replay, reuse (another payload)
    route: str
    tenant: str
    key: str
    payload: str  # digest of the request body
    gateway: int  # index of the gateway it was sent to
    start: float
    end: float
    status: int  # HTTP status, or REFUSED, CUT, TIMED_OUT
    outcome: str  # the Idempotency-Outcome header, if any
    body: str  # digest of the answer body
    execution: str  # the execution id a 2xx body names
    code: str  # the problem+json code of an error answer
    reason: str = ""  # the status line's reason phrase, escaped (`escaped`)
    head: str = ""  # digest of the headers as received, less the gateway's own (`clients`)
    # The Idempotency-Degraded header: a `fail_mode: open` route forwarded it without
    # idempotency, Redis being unreachable (the key may run again).
    degraded: str = ""
    replayed: str = ""  # the Idempotent-Replayed header (a replay, or a follower's answer)
    framing: str = ""  # how the body came: "chunked", "length" (Content-Length), "" (neither)
    # Of an answer that broke off after its head (status CUT or TIMED_OUT): its status and
    # the body bytes that came, "200 377"; `body` is then their digest, `execution` the one
    # they name (if they got that far). "" for any other attempt.
    partial: str = ""

    def line(self) -> str:
        return "\t".join(map(str, self)) + "\n"

    @property
    def broke_off(self) -> tuple[int, int] | None:
        """Of an answer that broke off after its head: its status and the bytes that came."""
        if not self.partial:
            return None
        status, length = self.partial.split()
        return int(status), int(length)

    @property
    def answered_2xx(self) -> bool:
        """Its head said 2xx: the answer came whole, or broke off after the head."""
        cut = self.broke_off
        return 200 <= self.status < 300 or (cut is not None and 200 <= cut[0] < 300)


def escaped(text: str) -> str:
    """Text as one field of a line: tabs, line ends, backslashes and bytes beyond ASCII
    written as Python escapes, so that a reason phrase of any bytes reads back as it came."""
    return text.encode("unicode_escape").decode("ascii")


class Execution(NamedTuple):
    """One call the upstream ran."""

    execution: str
    route: str
    tenant: str
    key: str
    payload: str
    attempt: str  # the X-Attempt that the gateway forwarded
    time: float
    body: str  # digest of the answer it wrote (or would have: see fault)
    fault: str  # "", "reset" (answer lost) or "hang" (answer held past the timeout)
    # The answer's body bytes, base64 ("": a log written before the upstream logged them).
    sent: str = ""

    def starts_with(self, length: int, body: str) -> bool | None:
        """Whether the first `length` bytes of its answer's body have the digest `body`;
        None where its bytes were not logged."""
        if not self.sent:
            return None
        sent = _decoded(self.sent)
        return len(sent) >= length and digest(sent[:length]) == body


class Fault(NamedTuple):
    """One fault the nemesis made, recorded as knossos records an operation: when the harness
    began to make it (`start`, its invoke) and had made it (`on`), when it began to end it
    (`off`) and had ended it (`end`, its completion). It may act from `start` to `end`, and
    surely acts from `on` to `off`: a gateway woken by SIGCONT runs again after `off`, never
    before. A fault of a folder kept before `on` and `off` were recorded has neither."""

    kind: str
    target: str
    start: float
    end: float
    on: float | None = None
    off: float | None = None

    @property
    def made(self) -> float:
        """Since when the fault surely acts."""
        return self.start if self.on is None else self.on

    @property
    def ending(self) -> float:
        """Until when the fault surely acts: its end began then."""
        return self.end if self.off is None else self.off


def read_attempts(path: Path, unreadable: list[str] | None = None) -> Iterator[Attempt]:
    """The attempts in `path`; a line that cannot be read is put in `unreadable` (a run's
    writers end cleanly, so any such line means a history the checker cannot trust). Lines
    of 15 fields, written before attempts kept their status line and head, read with both
    empty: such a history's replays are compared by status and body only."""
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            f = line.rstrip("\n").split("\t")
            try:
                if len(f) not in (15, 17, 18, 21):
                    raise ValueError(f"{len(f)} fields")
                attempt = Attempt(
                    f[0], f[1], f[2], f[3], f[4], f[5], f[6], int(f[7]), float(f[8]),
                    float(f[9]), int(f[10]), f[11], f[12], f[13], f[14], *f[15:],
                )  # fmt: skip
            except ValueError as exc:
                _unreadable(unreadable, path, number, exc)
                continue
            yield attempt


def read_executions(path: Path, unreadable: list[str] | None = None) -> Iterator[Execution]:
    """The executions in `path`; unreadable lines as for `read_attempts`."""
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            f = line.rstrip("\n").split("\t")
            try:
                if len(f) not in (9, 10):
                    raise ValueError(f"{len(f)} fields")
                if len(f) == 10:
                    _decoded(f[9])
                execution = Execution(
                    f[0], f[1], f[2], f[3], f[4], f[5], float(f[6]), f[7], f[8], *f[9:]
                )
            except ValueError as exc:
                _unreadable(unreadable, path, number, exc)
                continue
            yield execution


def _decoded(sent: str) -> bytes:
    try:
        return base64.b64decode(sent, validate=True)
    except binascii.Error as exc:
        raise ValueError(f"its answer's bytes: {exc}") from None


def _unreadable(found: list[str] | None, path: Path, number: int, exc: ValueError) -> None:
    if found is not None:
        found.append(f"{path.name} line {number} unreadable ({exc})")
