"""The admin listener keeps its clients to the public listener's limits: an idle keep-alive
connection, a head that never ends, a body that stops half way and a TLS handshake never
begun are closed within their timeout, and past `max_connections` a new connection is
answered 503. Raw sockets, plain and TLS, on a single process and on a `--workers`
supervisor's admin listener."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from testkit.polling import until
from testkit.procs import GatewayProcess

from .gateways import ADMIN_TOKEN
from .hostile import Wire, closed_by_peer, connect, every_worker_serving
from .upstream import CountingUpstream, serving_app

LIMITS = {
    "request_header_timeout": "1s",
    "request_body_gap_timeout": "1s",
    "request_body_timeout": "2s",
    "keepalive_timeout": "2s",
    "client_write_timeout": "1s",  # a TLS close waits this long for the client's close_notify
    "max_connections": 6,
}
# The longest a limit above, plus room for a loaded machine.
CLOSED_WITHIN = 2.0 + 6.0


def read_answer(sock: socket.socket) -> bytes:
    """One answer: its head and Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )  # fmt: skip
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


async def closed_in_time(sock: socket.socket, what: str) -> float:
    return await until(lambda: closed_by_peer(sock), CLOSED_WITHIN, what)


@pytest.mark.parametrize("workers", [1, 2])
async def test_the_admin_listener_closes_idle_and_half_sent_connections(
    redis_url: str, tmp_path: Path, wire: Wire, workers: int
) -> None:
    admin: dict[str, Any] = {"host": "127.0.0.1", "token": ADMIN_TOKEN}
    config: dict[str, Any] = {
        "redis": {"url": redis_url},
        "blob": {"url": f"file://{tmp_path}/blobs"},
        "limits": LIMITS,
        "admin": admin,
    }
    if wire.listen_tls is not None:
        admin["tls"] = wire.listen_tls
    counting = CountingUpstream()
    opened: list[socket.socket] = []
    async with serving_app(counting.app()) as origin:
        config["routes"] = [{"name": "api", "path_prefix": "/", "upstream": origin}]
        gateway = GatewayProcess(config, tmp_path, ["--workers", str(workers)])
        admin_port = gateway.admin_port
        await asyncio.to_thread(gateway.start)
        try:
            await every_worker_serving(gateway, admin_port, workers)

            def admin_connection() -> socket.socket:
                sock = connect(admin_port, wire=wire)
                opened.append(sock)
                return sock

            # Idle after an answer: closed by keepalive_timeout.
            idle = admin_connection()
            idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
            assert b" 200 " in read_answer(idle)
            # A head that never ends: closed by request_header_timeout.
            head = admin_connection()
            head.sendall(b"GET /metrics HTTP/1.1\r\nHost: admin\r\n")
            # Half a body on an endpoint that reads it: closed by request_body_timeout.
            body = admin_connection()
            body.sendall(
                b"POST /keys/show HTTP/1.1\r\nHost: admin\r\nContent-Type: application/json\r\n"
                b'Authorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{"route":'
                % ADMIN_TOKEN.encode()
            )
            checks = [
                closed_in_time(idle, "an idle keep-alive connection closed"),
                closed_in_time(head, "a head that never ends closed"),
                closed_in_time(body, "half a body closed"),
            ]
            if wire.client is not None:  # a TLS handshake never begun
                silent = socket.create_connection(("127.0.0.1", admin_port))
                opened.append(silent)
                checks.append(closed_in_time(silent, "a handshake never begun closed"))
            started = time.monotonic()
            await asyncio.gather(*checks)
            assert time.monotonic() - started >= 0.5  # closed by the timeouts, not at once
        finally:
            for sock in opened:
                with contextlib.suppress(OSError):
                    sock.close()
            assert await asyncio.to_thread(gateway.stop) == 0
    assert "Traceback" not in gateway.log()


@pytest.mark.parametrize("workers", [1, 2])
async def test_the_admin_listener_answers_503_past_max_connections(
    redis_url: str, tmp_path: Path, wire: Wire, workers: int
) -> None:
    admin: dict[str, Any] = {"host": "127.0.0.1"}
    if wire.listen_tls is not None:
        admin["tls"] = wire.listen_tls
    counting = CountingUpstream()
    held: list[socket.socket] = []
    async with serving_app(counting.app()) as origin:
        config: dict[str, Any] = {
            "redis": {"url": redis_url},
            "blob": {"url": f"file://{tmp_path}/blobs"},
            "limits": {**LIMITS, "keepalive_timeout": "30s", "request_header_timeout": "30s"},
            "admin": admin,
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
        gateway = GatewayProcess(config, tmp_path, ["--workers", str(workers)])
        admin_port = gateway.admin_port
        await asyncio.to_thread(gateway.start)
        try:
            await every_worker_serving(gateway, admin_port, workers)
            for _ in range(LIMITS["max_connections"]):  # type: ignore[arg-type]
                sock = connect(admin_port, wire=wire)
                held.append(sock)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
                assert b" 200 " in read_answer(sock)  # counted, and kept open
            extra = connect(admin_port, wire=wire)
            held.append(extra)
            extra.settimeout(10)
            refused = read_answer(extra)
            assert refused.startswith(b"HTTP/1.1 503 ") and b"too-many-connections" in refused
            held.pop(0).close()  # one fewer: a new connection is served again

            def served() -> bool:
                """A new connection is served (one refused is closed again)."""
                sock = connect(admin_port, wire=wire)
                held.append(sock)
                sock.settimeout(10)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n")
                if b" 200 " in read_answer(sock):
                    return True
                held.pop().close()
                return False

            await until(
                lambda: asyncio.to_thread(served), 10, "a connection served again", every=0.1
            )
        finally:
            for sock in held:
                with contextlib.suppress(OSError):
                    sock.close()
            assert await asyncio.to_thread(gateway.stop) == 0
