"""Listening sockets, bound by the gateway itself so that a busy or forbidden port is a
one-line refusal before anything says "listening", and so that the workers of one gateway
share the socket their parent bound (no SO_REUSEPORT: a second, independent gateway cannot
join the port and split its connections between two Redis)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket


class ListenError(Exception):
    """The address cannot be listened on; the message names it and says why."""


def bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to host:port, not listening yet: a gateway listens once it serves,
    so that connections are refused rather than queued behind a start that may fail; a
    `--workers` parent listens (`start_listening`) before it starts its workers.
    `reuse_port` lets independent gateways share the port (SO_REUSEPORT), for the documented
    case of several gateways on one external Redis."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Rebinding over connections in TIME_WAIT; on Linux it never lets two sockets listen.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "the address is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ListenError(f"cannot listen on {host}:{port}: {why}") from None
    return sock


def inherited(fd: int, option: str) -> socket.socket:
    """The TCP socket that whatever started this gateway bound for it and passed as file
    descriptor `fd` (a `--workers` parent to its workers; a test's harness, which holds its
    ports: `option` names the flag): one line when `fd` is no such socket."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        why = exc.strerror
        raise ListenError(f"{option} {fd}: not a socket this gateway was given ({why})") from None
    if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
        sock.detach()  # not ours to close
        raise ListenError(f"{option} {fd}: not a TCP socket")
    return sock


def start_listening(sock: socket.socket, backlog: int) -> None:
    """Listen on a socket `bind` gave. Two gateways started in the same instant can both bind
    (SO_REUSEADDR) but only one can listen: the other is refused here, in one line."""
    try:
        sock.listen(backlog)
    except OSError as exc:
        host, port = sock.getsockname()[:2]
        why = "the address is in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ListenError(f"cannot listen on {host}:{port}: {why}") from None


def bind_private(path: str) -> socket.socket:
    """A unix socket at `path` that only this user may connect to (a worker's channel to its
    supervisor); a socket file left by a worker that died is replaced."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
    except OSError:
        sock.close()
        raise
    return sock
