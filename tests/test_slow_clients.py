"""A client that stops reading never holds its key or an upstream connection: the answer is
recorded at the upstream's pace, and the stalled client is cut by the write timeout."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from testkit.polling import until

from .gateways import GatewayFactory, gateway_settings
from .hostile import BigAnswers, closed_by_peer, connect, pattern, request, start_gateway
from .rawhttp import one_answer
from .upstream import serving

SIZE = 12 << 20  # far more than the socket buffers of both ends hold


@pytest.fixture
async def big() -> AsyncIterator[tuple[BigAnswers, str]]:
    upstream = BigAnswers(SIZE)
    async with serving(upstream) as origin:
        yield upstream, origin


async def test_a_client_that_never_reads_does_not_hold_its_key(
    big: tuple[BigAnswers, str], redis_url: str, tmp_path: Path
) -> None:
    upstream, origin = big
    write_timeout = 6.0
    gateway = start_gateway(origin, redis_url, tmp_path, {"client_write_timeout": write_timeout})
    try:
        stalled = connect(gateway.port, receive_buffer=4096)
        stalled.sendall(request("/pay", "k-stalled"))
        sent = time.monotonic()
        # A retry from another socket: 409 while the first one runs, then the replay.
        while True:
            status, head, body = await one_answer(gateway.port, request("/pay", "k-stalled"))
            if status != 409:
                break
            assert time.monotonic() - sent < write_timeout / 2, "the key stayed in flight"
            await asyncio.sleep(0.05)
        completed = time.monotonic() - sent
        assert status == 201 and b"Idempotent-Replayed: true" in head
        assert body == upstream.body  # byte for byte, from the blob store
        assert upstream.count == 1
        assert completed < write_timeout / 2
        assert not closed_by_peer(stalled)  # it is still connected, still not reading
        # The upstream connection went back to the pool: a new key reuses it.
        status, _, body = await one_answer(gateway.port, request("/pay", "k-next"))
        assert status == 201 and len(body) == SIZE
        assert (upstream.count, upstream.connections) == (2, 1)
        # The stalled client is cut by the write timeout, not before.
        waited = await until(lambda: closed_by_peer(stalled), write_timeout + 5, "write timeout")
        assert time.monotonic() - sent > write_timeout - 1
        assert waited < write_timeout + 5
        stalled.close()
    finally:
        gateway.stop()


async def test_a_slow_reader_gets_the_whole_answer_from_the_record(
    big: tuple[BigAnswers, str], redis_url: str, tmp_path: Path
) -> None:
    """A client far behind its upstream gets the rest of the body from the recorded blob,
    byte for byte, once the answer is stored."""
    upstream, origin = big
    gateway = start_gateway(origin, redis_url, tmp_path, {"client_buffer": "64KiB"})
    try:
        slow = connect(gateway.port, receive_buffer=4096)
        slow.sendall(request("/pay", "k-slow"))
        # Wait until the answer is stored (the retry replays), reading nothing meanwhile.
        sent = time.monotonic()
        while (await one_answer(gateway.port, request("/pay", "k-slow")))[0] == 409:
            assert time.monotonic() - sent < 10, "the key stayed in flight"
            await asyncio.sleep(0.05)
        received = await asyncio.to_thread(_read_all, slow)
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 201")
        assert body == pattern(SIZE)
        assert upstream.count == 1
    finally:
        gateway.stop()


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    chunks = []
    total = 0
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        head, sep, _ = b"".join(chunks[:1]).partition(b"\r\n\r\n")
        if sep and total >= len(head) + 4 + SIZE:
            break
    sock.close()
    return b"".join(chunks)


async def test_a_recorded_answer_still_holds_its_last_bytes_until_stored(
    make_gateway: GatewayFactory, big: tuple[BigAnswers, str]
) -> None:
    """In process (no write timeout there): the answer reaches a reading client whole."""
    upstream, origin = big
    client = await make_gateway(settings=gateway_settings(origin))
    response = await client.post("/pay", data=b"{}", headers={"Idempotency-Key": "k"})
    assert response.status == 201
    assert await response.read() == upstream.body


def _dechunked(body: bytes) -> bytes:
    """A chunked body's content (no extensions, no trailers: as the gateway writes it)."""
    content, at = [], 0
    while True:
        line_end = body.index(b"\r\n", at)
        size = int(body[at:line_end], 16)
        if size == 0:
            return b"".join(content)
        content.append(body[line_end + 2 : line_end + 2 + size])
        at = line_end + 2 + size + 2


async def test_a_client_behind_an_answer_that_outgrows_max_recorded_body_gets_it_whole(
    redis_url: str, tmp_path: Path
) -> None:
    """A chunked answer grows past max_recorded_body while its client is far behind: it is
    not recorded (retries get 502), but the client, which the record could not feed, is fed
    from a spill of the body, byte for byte, and the spill is gone once it has it."""
    upstream = BigAnswers(SIZE, chunked=True)
    async with serving(upstream) as origin:
        limits = {"client_buffer": "64KiB"}
        gateway = start_gateway(origin, redis_url, tmp_path, limits, max_recorded_body="1MiB")
        try:
            slow = connect(gateway.port, receive_buffer=4096)
            slow.sendall(request("/pay", "k-spill", extra=b"Connection: close\r\n"))
            sent = time.monotonic()
            while (
                status := (await one_answer(gateway.port, request("/pay", "k-spill")))[0]
            ) == 409:
                assert time.monotonic() - sent < 10, "the key stayed in flight"
                await asyncio.sleep(0.05)  # pacing the retries, as a client would
            assert status == 502  # body-not-recorded: over max_recorded_body
            slow.settimeout(20)
            received = await asyncio.to_thread(_read_to_close, slow)
            head, _, body = received.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 201")
            assert _dechunked(body) == pattern(SIZE)
            assert upstream.count == 1
            await until(lambda: not list((tmp_path / "blobs").iterdir()), 10, "the spill removed")
        finally:
            gateway.stop()


def _read_to_close(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)
