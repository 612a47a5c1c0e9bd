"""`testkit.ports.Port`: a port held from the moment it is chosen, which no other bind(0) and
no connection's own end is given, where nothing answers until its server listens, and
which its server (handed a socket, or binding beside the hold) finds free at every start."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from testkit.ports import Port, port_pair
from testkit.procs import GatewayProcess
from testkit.redis_server import RedisServer

from .upstream import CountingUpstream

IP_LOCAL_PORT_RANGE = 51  # Linux 6.3: a socket's own range for the ports the kernel picks


@contextlib.contextmanager
def only(port: int) -> Iterator[socket.socket]:
    """A socket whose kernel-picked ports can be `port` alone."""
    sock = socket.socket()
    try:
        sock.setsockopt(socket.IPPROTO_IP, IP_LOCAL_PORT_RANGE, struct.pack("I", port << 16 | port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.ENOPROTOOPT:
            pytest.skip("this kernel has no IP_LOCAL_PORT_RANGE to pick one port with")
        raise
    try:
        yield sock
    finally:
        sock.close()


def test_no_bind_to_port_0_is_given_a_held_port() -> None:
    with Port() as held:
        for reuse in (False, True):  # with SO_REUSEADDR, as a server binds, too
            with only(held.number) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, int(reuse))
                with pytest.raises(OSError) as refused:
                    sock.bind(("127.0.0.1", 0))
                assert refused.value.errno == errno.EADDRINUSE


def test_no_connection_is_given_a_held_port_as_its_own_end() -> None:
    with Port() as held, socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with only(held.number) as sock:
            with pytest.raises(OSError) as refused:
                sock.connect(server.getsockname())
            assert refused.value.errno == errno.EADDRNOTAVAIL


def test_a_connection_to_a_held_port_is_refused_until_a_server_listens() -> None:
    with Port() as held:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", held.number), timeout=5).close()
        for _ in range(2):  # a server, then the same server started again
            with held.socket() as sock:
                sock.listen()
                with socket.create_connection(("127.0.0.1", held.number), timeout=5):
                    pass
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", held.number), timeout=5).close()


def test_a_held_port_is_nobody_elses_to_hold_or_to_serve_twice() -> None:
    with Port() as held:
        with pytest.raises(OSError):
            Port(held.number)
        with held.socket() as serving:
            serving.listen()
            with pytest.raises(OSError):
                held.socket()  # a second server: refused while the first listens


def test_a_pair_holds_both_ports() -> None:
    first, bus = port_pair(10_000)
    try:
        assert bus.number == first.number + 10_000
        for each in (first, bus):
            with pytest.raises(OSError):
                Port(each.number)
    finally:
        first.close()
        bus.close()


def test_a_redis_server_binds_its_held_port_at_every_start() -> None:
    server = RedisServer()
    try:
        server.start()
        server.stop()
        with pytest.raises(ConnectionRefusedError):  # down: nothing answers in its place
            socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
        server.start()
    finally:
        server.close()


async def test_a_gateway_process_is_handed_its_sockets_and_serves_on_them_again(
    upstream: tuple[CountingUpstream, str], redis_url: str, tmp_path: Path
) -> None:
    """The public and admin sockets are bound here and inherited; stopped, its port refuses
    connections (none waits in a backlog for a gateway that is not there) and stays its
    own; started again, it serves there."""
    _, origin = upstream
    config = {
        "redis": {"url": redis_url},
        "admin": {},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path)
    try:
        for _ in range(2):
            await asyncio.to_thread(gateway.start)
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{gateway.url}/pay") as answer:
                    assert answer.status == 201
                async with http.get(f"http://127.0.0.1:{gateway.admin_port}/healthz") as answer:
                    assert answer.status == 200
            assert await asyncio.to_thread(gateway.stop) == 0
            for port in (gateway.port, gateway.admin_port):
                with pytest.raises(ConnectionRefusedError):
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                with pytest.raises(OSError):
                    Port(port)  # still held
    finally:
        gateway.close()
    log = gateway.log()
    assert "cannot listen" not in log and "Traceback" not in log
    assert "worker pid" not in log  # one gateway, not a worker of a --workers parent
