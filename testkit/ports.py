"""Loopback ports: picking a free one, and waiting until a child process listens on one."""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import subprocess
import time
from pathlib import Path

# Ports are picked below the kernel's ephemeral range: a port a test picked and has not yet
# bound is never handed out meanwhile to another server's bind(0) or a client connection's
# own end (a floor started on a port that an upstream of another xdist worker had taken by
# then answered as that upstream). Under xdist each worker picks in a slice of its own.
FIRST = 10_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def _slice() -> tuple[int, int]:
    """This process's ports: the first and how many (the xdist worker's share)."""
    span = _ephemeral_start() - FIRST
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker) % count if worker.isdigit() and count > 0 else 0
    size = span // max(count, 1)
    return FIRST + index * size, size


_FIRST_OF_SLICE, _SLICE = _slice()
# A process starts at a random place in its slice: another process of the same worker (a
# harness a test runs) then rarely walks the same ports, and a port it holds is skipped.
_NEXT = itertools.count(secrets.randbelow(max(_SLICE, 1)))


def free_port() -> int:
    """A port free on 127.0.0.1 now, that nothing else takes before the caller binds it but
    another picker of the same slice (see FIRST)."""
    if _SLICE < 100:  # an ephemeral range that starts low: no room below it
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    for _ in range(_SLICE):
        port = _FIRST_OF_SLICE + next(_NEXT) % _SLICE
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use, or its connections still closing
                continue
        return port
    raise OSError(f"no free port in {_FIRST_OF_SLICE}-{_FIRST_OF_SLICE + _SLICE - 1}")


def wait_for_port(
    port: int, process: subprocess.Popen[bytes] | None = None, timeout: float = 20.0
) -> None:
    """Poll until something accepts connections on 127.0.0.1:port, with a deadline; fail at
    once if `process` exits first."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on port {port} after {timeout}s") from None
            time.sleep(0.02)
