"""Hostile clients of a TLS listener, on raw sockets: a handshake that stalls is cut after the
listener's head timeout, bytes that are no ClientHello and plain HTTP sent to the TLS port
are closed without a traceback, a TLS 1.0 client is refused. The gateway serves on after
each, and holds none of their sockets."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from testkit.polling import until
from testkit.procs import GatewayProcess

from .hostile import (
    BigAnswers,
    Wire,
    client_fds,
    closed_by_peer,
    request,
    start_gateway,
    tls_wire,
)
from .rawhttp import one_answer
from .upstream import serving

LIMITS = {"request_header_timeout": "1s", "keepalive_timeout": "30s"}


@pytest.fixture(params=["uvloop", "asyncio"])
async def tls_gateway(
    request: pytest.FixtureRequest, redis_url: str, tmp_path: Path
) -> AsyncIterator[tuple[GatewayProcess, Wire]]:
    wire = tls_wire(tmp_path / "ca")
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, LIMITS, request.param, wire=wire)
        try:
            yield gateway, wire
            # It still serves, and none of the hostile clients' sockets is left.
            status, _, _ = await one_answer(gateway.port, _request("after"), tls=wire.client)
            assert status == 201
            assert gateway.process is not None
            pid = gateway.process.pid
            await until(lambda: client_fds(pid, gateway.port) == 0, 5, "sockets released")
        finally:
            gateway.stop()
        log = gateway.log()
        assert "Traceback" not in log and '"level":"error"' not in log, log


def _request(key: str) -> bytes:
    return request("/pay", key, extra=b"Connection: close\r\n")


def client_hello(context: ssl.SSLContext) -> bytes:
    """The ClientHello `context` would send, as bytes."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def raw(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_to_close(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


@pytest.mark.parametrize("sent", ["nothing", "half a ClientHello"])
async def test_a_stalled_handshake_is_cut_after_the_head_timeout(
    tls_gateway: tuple[GatewayProcess, Wire], sent: str
) -> None:
    gateway, wire = tls_gateway
    assert wire.client is not None
    with raw(gateway.port) as sock:
        if sent != "nothing":
            hello = client_hello(wire.client)
            sock.sendall(hello[: len(hello) // 2])
        started = time.monotonic()
        await until(lambda: closed_by_peer(sock), 5, "a stalled handshake was never cut")
        assert time.monotonic() - started > 0.5  # by the timeout, not at once
        assert read_to_close(sock) == b""  # no answer: nothing was asked


async def test_bytes_that_are_no_client_hello_are_closed(
    tls_gateway: tuple[GatewayProcess, Wire],
) -> None:
    gateway, _ = tls_gateway
    with raw(gateway.port) as sock:
        sock.sendall(os.urandom(64) + bytes(range(256)) * 4)
        answer = await asyncio.to_thread(read_to_close, sock)
    assert not answer.startswith(b"HTTP/")  # at most a TLS alert


async def test_plain_http_sent_to_the_tls_port_is_closed_cleanly(
    tls_gateway: tuple[GatewayProcess, Wire],
) -> None:
    gateway, _ = tls_gateway
    with raw(gateway.port) as sock:
        sock.sendall(_request("plain"))
        answer = await asyncio.to_thread(read_to_close, sock)
    # A TLS alert (a record of type 21) or nothing: no HTTP answer, and nothing forwarded.
    assert answer == b"" or answer[:1] == b"\x15", answer[:40]


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1.* is deprecated:DeprecationWarning")
@pytest.mark.parametrize("version", ["TLSv1", "TLSv1_1"])
async def test_a_client_older_than_tls_1_2_is_refused(
    tls_gateway: tuple[GatewayProcess, Wire], version: str
) -> None:
    gateway, wire = tls_gateway
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname = False
    old.verify_mode = ssl.CERT_NONE
    old.minimum_version = old.maximum_version = ssl.TLSVersion[version]
    old.set_ciphers("ALL:@SECLEVEL=0")  # so that this OpenSSL offers it at all
    hello = client_hello(old)
    assert hello[9:11] == {"TLSv1": b"\x03\x01", "TLSv1_1": b"\x03\x02"}[version]

    def handshake() -> None:
        with raw(gateway.port) as sock, pytest.raises(ssl.SSLError):
            old.wrap_socket(sock, server_hostname="127.0.0.1")

    await asyncio.to_thread(handshake)
    status, _, _ = await one_answer(gateway.port, _request("modern"), tls=wire.client)
    assert status == 201
