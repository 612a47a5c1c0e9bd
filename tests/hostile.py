"""What the hostile-client tests share: a raw upstream that sends large answers and counts its
connections, a gateway process with short limits, and raw-socket clients."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.polling import until
from testkit.ports import wait_for_port
from testkit.procs import STARTS_WITHIN, GatewayProcess

from .tls_certs import private_ca
from .upstream import RawUpstream, read_raw_request

TCP_ESTABLISHED = 1


@dataclass(frozen=True)
class Wire:
    """How the raw clients reach a gateway: plain TCP, or TLS to a `listen.tls` listener
    whose certificate a private CA signed."""

    client: ssl.SSLContext | None = None  # the clients' context; None: plain TCP
    listen_tls: dict[str, str] | None = None  # the gateway's `listen.tls`

    def closing(self, limits: dict[str, Any]) -> dict[str, Any]:
        """`limits` for a test that waits for the gateway to close a connection: over TLS
        the close waits `client_write_timeout` for the client's close_notify, which a raw
        client that does not read never sends: a short one."""
        return limits if self.client is None else {**limits, "client_write_timeout": "1s"}

    @property
    def name(self) -> str:
        return "plain" if self.client is None else "tls"

    def wrap(self, sock: socket.socket) -> socket.socket:
        """`sock`, its handshake done when TLS."""
        if self.client is None:
            return sock
        return self.client.wrap_socket(sock, server_hostname="127.0.0.1")


PLAIN = Wire()


def tls_wire(folder: Path) -> Wire:
    ca = private_ca(folder)
    cert, key = ca.leaf_files("gateway")
    client = ssl.create_default_context(cafile=ca.ca_file)
    return Wire(client, {"cert": cert, "key": key})


def pattern(size: int) -> bytes:
    """A body whose every offset is distinct enough to show a byte out of place."""
    block = bytes(range(251))  # a prime length: misplaced slices do not line up
    return (block * (size // len(block) + 1))[:size]


class BigAnswers(RawUpstream):
    """Answers each request with 201 and `size` bytes after `delay` seconds; counts calls,
    connections and the most connections in use at once."""

    def __init__(
        self, size: int, delay: float = 0.0, head_extra: bytes = b"", chunked: bool = False
    ) -> None:
        super().__init__()
        self.body = pattern(size)
        self.delay = delay
        self.head_extra = head_extra
        self.chunked = chunked  # sent in 64 KiB chunks, its length nowhere in the head
        self.connections = 0
        self.busy = 0
        self.most_busy = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                await read_raw_request(reader)
                self.count += 1
                self.busy += 1
                self.most_busy = max(self.most_busy, self.busy)
                try:
                    await asyncio.sleep(self.delay)
                    if self.chunked:
                        writer.write(
                            b"HTTP/1.1 201 Created\r\n%sTransfer-Encoding: chunked\r\n\r\n"
                            % self.head_extra
                        )
                        for at in range(0, len(self.body), 1 << 16):
                            piece = self.body[at : at + (1 << 16)]
                            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        writer.write(b"0\r\n\r\n")
                    else:
                        writer.write(
                            b"HTTP/1.1 201 Created\r\n%sContent-Length: %d\r\n\r\n"
                            % (self.head_extra, len(self.body))
                        )
                        writer.write(self.body)
                    await writer.drain()
                finally:
                    self.busy -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def start_gateway(
    origin: str,
    redis_url: str,
    workdir: Path,
    limits: dict[str, Any],
    loop: str = "uvloop",
    admin: bool = False,
    wire: Wire = PLAIN,
    redis: dict[str, Any] | None = None,
    **route: Any,
) -> GatewayProcess:
    config: dict[str, Any] = {
        "loop": loop,
        "redis": {"url": redis_url, **(redis or {})},
        "blob": {"url": f"file://{workdir}/blobs"},
        "log_level": "warning",
        "limits": limits,
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, **route}],
    }
    if admin:  # on a port the GatewayProcess holds (its `admin_port`)
        config["admin"] = {"host": "127.0.0.1"}
    if wire.listen_tls is not None:
        config["listen"] = {"tls": wire.listen_tls}
    return GatewayProcess(config, workdir).start()


def request(path: str, key: str | None, body: bytes = b"{}", extra: bytes = b"") -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n" % (path.encode(), len(body))
    if key is not None:
        head += b"Idempotency-Key: %s\r\n" % key.encode()
    return head + extra + b"\r\n" + body


def connect(port: int, receive_buffer: int | None = None, wire: Wire = PLAIN) -> socket.socket:
    """A blocking client socket (its TLS handshake done, over a TLS `wire`); a small receive
    buffer makes a client that does not read stall its sender sooner."""
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(("127.0.0.1", port))
    try:
        return wire.wrap(sock)
    except BaseException:
        sock.close()
        raise


def tcp_state(sock: socket.socket) -> int:
    """The kernel's TCP state of a client socket (1: established; a reset or a FIN from
    the gateway moves it on) without reading what is buffered."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return int(struct.unpack("B", info[:1])[0])


async def every_worker_serving(
    gateway: GatewayProcess,
    admin_port: int,
    workers: int,
    timeout: float = STARTS_WITHIN,
    scheme: str = "",
) -> None:
    """Wait until a started `--workers` gateway answers on its admin port and each of its
    workers has said it listens (on `scheme`, `http` or `https`, when given)."""
    assert gateway.process is not None
    wait_for_port(admin_port, gateway.process)
    said = f"idem-gateway listening on {scheme}".rstrip()
    await until(
        lambda: gateway.log().count(said) == workers, timeout, "every worker serving", every=0.05
    )


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def client_fds(pid: int, port: int) -> int:
    """The process's sockets that are client connections to its listening `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] != "0A":  # 0A: the listening socket
                    inodes.add(fields[9])
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in inodes:
                held += 1
    return held


def closed_by_peer(sock: socket.socket) -> bool:
    return tcp_state(sock) != TCP_ESTABLISHED
