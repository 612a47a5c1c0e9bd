"""A crowd of hostile clients at once: slow heads, slow bodies, idle keep-alive connections
and clients that never read their answers. With the limits at about a second, every one of
their connections is closed, the gateway's file descriptors come back to where they were,
and the keys of the clients that never read are complete and replay byte for byte."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from pathlib import Path

import aiohttp
import pytest

from .hostile import (
    BigAnswers,
    Wire,
    client_fds,
    closed_by_peer,
    connect,
    open_fds,
    request,
    start_gateway,
)
from .rawhttp import one_answer
from .scrape import sample
from .upstream import serving

LIMITS = {
    "request_header_timeout": "1s",
    "request_body_gap_timeout": "1s",
    "request_body_timeout": "2s",
    "keepalive_timeout": "2s",  # longer than the head's: slow heads are cut by theirs
    "client_write_timeout": "2s",
}
SLOW_HEADS, SLOW_BODIES, IDLE, NOT_READING = 50, 20, 20, 8


def _trickle(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # closed by the gateway: what the test waits for
        sock.send(data)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_hostile_clients_are_closed_and_their_keys_complete(
    redis_url: str, tmp_path: Path, loop: str, wire: Wire
) -> None:
    upstream = BigAnswers(8 << 20)
    async with serving(upstream) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, LIMITS, loop, admin=True, wire=wire)
        admin = gateway.admin_port
        assert gateway.process is not None
        pid = gateway.process.pid
        every: list[socket.socket] = []
        try:
            status, _, _ = await one_answer(gateway.port, request("/warm", "warm"), tls=wire.client)
            assert status == 201  # Redis, blob store and upstream connections are open
            baseline = open_fds(pid)
            heads = [connect(gateway.port, wire=wire) for _ in range(SLOW_HEADS)]
            for sock in heads:
                sock.sendall(b"POST /pay HTTP/1.1\r\nHost: gw\r\n")
            bodies = [connect(gateway.port, wire=wire) for _ in range(SLOW_BODIES)]
            for n, sock in enumerate(bodies):
                sock.sendall(request("/pay", f"body-{n}", b"x" * 1000)[:-990])
            idle = [connect(gateway.port, wire=wire) for _ in range(IDLE)]
            for sock in idle:
                sock.sendall(request("/pay", ""))  # 400 (an empty key), then nothing
            stalled = [
                connect(gateway.port, receive_buffer=4096, wire=wire) for _ in range(NOT_READING)
            ]
            for n, sock in enumerate(stalled):
                sock.sendall(request("/pay", f"stalled-{n}"))
            every = heads + bodies + idle + stalled
            started = time.monotonic()
            while True:
                for sock in heads:
                    _trickle(sock, b"X-Slow: y\r\n")
                for sock in bodies:
                    _trickle(sock, b"x")
                open_ = [sock for sock in every if not closed_by_peer(sock)]
                # Pooled upstream connections may have grown by one per concurrent call.
                held, fds = client_fds(pid, gateway.port), open_fds(pid)
                if not open_ and not held and fds <= baseline + NOT_READING + 2:
                    break
                assert time.monotonic() - started < 12, (
                    f"{len(open_)} hostile clients not closed, gateway holds {held} client "
                    f"sockets and {fds} fds (from {baseline})"
                )
                await asyncio.sleep(0.2)
            for n in range(NOT_READING):
                sent = request("/pay", f"stalled-{n}")
                status, head, body = await one_answer(gateway.port, sent, tls=wire.client)
                assert status == 201 and b"Idempotent-Replayed: true" in head
                assert body == upstream.body
            assert upstream.count == 1 + NOT_READING
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://127.0.0.1:{admin}/metrics") as scraped,
            ):
                text = await scraped.text()
            # Each got in and was closed by its own limit, as the gateway counts them (the
            # most it held at once says less: beside other work, the test opens the crowd
            # slower than the first of them are cut).
            cut = "idem_client_connections_cut_total"
            assert sample(text, cut, reason="header-timeout") >= SLOW_HEADS
            assert sample(text, cut, reason="write-timeout") == NOT_READING
            # The slow bodies' 408s and the idle clients' 400s.
            rejected = sample(text, "idem_requests_total", outcome="rejected")
            assert rejected >= SLOW_BODIES + IDLE
            assert sample(text, "idem_client_connections") <= 1  # the scrape's own, if any
        finally:
            for sock in every:
                sock.close()
            # In a thread: the upstream serves from this loop, and a gateway still
            # forwarding to it drains until the upstream's timeout if the loop is held.
            await asyncio.to_thread(gateway.stop)
