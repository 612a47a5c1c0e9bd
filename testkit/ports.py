"""Loopback ports: picking a free one, and waiting until a child process listens on one."""

from __future__ import annotations

import socket
import subprocess
import time


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
