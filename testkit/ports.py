"""Loopback ports for the servers the tests start, held from the moment they are chosen, and
waiting until a child process listens on one.

A port picked free and let go before its server binds it can be taken meanwhile (another
server's bind(0), a connection's own end: a gateway then talked to another test's upstream
on its port). So every port here is bound first, by the kernel's choice (port 0), and kept:

- a server that takes a socket is handed one (`Port.socket`): the gateway inherits it
  (`--listen-fd`, `--admin-fd`), an in-process aiohttp server binds port 0 itself;
- a server that binds by itself (redis-server, nginx, moto, a harness's child) binds the
  held port beside this process's hold: the hold is a bound socket that never listens, with
  SO_REUSEADDR, which such servers set too. Linux gives a port bound so to no other bind(0)
  and to no connection's own end, and lets a socket with SO_REUSEADDR bind it as long as
  none listens there: the server's bind never fails for want of a free port, and a server
  stopped and started again finds its port still its own.

While nothing listens on a held port, a connection to it is refused: it is also a port
where nothing answers (`Port` of a server that is down).
"""

from __future__ import annotations

import socket
import subprocess
import time
import weakref
from types import TracebackType

LOOPBACK = "127.0.0.1"


class Port:
    """A loopback port this process holds until `close` (or until the Port is dropped):
    `number` is it. `number=0` (the default) lets the kernel choose one; a number asks for
    that one, refused (OSError) when anything holds it, a server or another hold."""

    def __init__(self, number: int = 0, host: str = LOOPBACK) -> None:
        self.host = host
        hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            hold.bind((host, number))  # without SO_REUSEADDR: refused if anything holds it
            # From now on a server with SO_REUSEADDR may bind it too, while none listens.
            hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        except BaseException:  # OverflowError too: a number past the last port
            hold.close()
            raise
        self.number: int = hold.getsockname()[1]
        self._release = weakref.finalize(self, hold.close)

    def socket(self) -> socket.socket:
        """A socket bound to this port (not listening yet), for a server to be handed: it
        listens once it serves, and connections until then are refused."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.number))
        except OSError:
            sock.close()
            raise
        return sock

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.number}"

    def close(self) -> None:
        """Let the port go (closing again does nothing)."""
        self._release()

    def __enter__(self) -> Port:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


_KEPT: list[Port] = []


def kept_port() -> int:
    """A port held for the rest of this process's life, for a harness (a load run, a
    verification run) whose servers bind it themselves: its number."""
    port = Port()
    _KEPT.append(port)
    return port.number


def port_pair(offset: int) -> tuple[Port, Port]:
    """Two held ports `offset` apart (a Redis Cluster node's port and its bus port, +10000)."""
    while True:
        first = Port()
        try:
            return first, Port(first.number + offset)
        except (OSError, OverflowError):  # held, or past the last port: another pair
            first.close()


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
            with socket.create_connection((LOOPBACK, port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on port {port} after {timeout}s") from None
            time.sleep(0.02)
