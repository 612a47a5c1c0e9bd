"""Each limit on what a client or an answer may hold, over raw sockets: recorded header size,
header and body read timeouts, keep-alive idle time, client connections, upstream
connections."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import time
from pathlib import Path

import orjson
import pytest
import yaml

from gateway.config.settings import Limits
from gateway.http.app import LIVE
from gateway.http.server.limits import SPARE_FILES, fit_open_files
from gateway.ops.reload import apply
from testkit.polling import until

from .gateways import GatewayFactory, gateway_settings
from .hostile import BigAnswers, Wire, closed_by_peer, connect, request, start_gateway
from .rawhttp import one_answer
from .upstream import serving

LONG = 30  # a limit kept out of the way of the one under test


async def test_answer_headers_over_the_limit_are_not_recorded(
    make_gateway: GatewayFactory,
) -> None:
    upstream = BigAnswers(10, head_extra=b"X-Big: " + b"a" * (100 << 10) + b"\r\n")
    async with serving(upstream) as origin:
        client = await make_gateway(settings=gateway_settings(origin))
        port = client.server.port
        assert port is not None
        status, head, body = await one_answer(port, request("/pay", "k"))
        # The upstream ran: its answer reaches the client whole, and the key completes
        # without it, so a retry is told it cannot be replayed and never runs it again.
        assert status == 201 and b"X-Big: " + b"a" * (100 << 10) in head
        status, head, body = await one_answer(port, request("/pay", "k"))
        assert status == 502 and b"X-Big" not in head
        assert orjson.loads(body)["code"] == "answer-headers-too-large"
        assert upstream.count == 1
        roomy = await make_gateway(settings=gateway_settings(origin, max_recorded_headers="1MiB"))
        assert roomy.server.port is not None
        status, head, _ = await one_answer(roomy.server.port, request("/pay", "k2"))
        assert status == 201 and b"X-Big: aaaa" in head


async def test_a_head_sent_byte_by_byte_is_cut(redis_url: str, tmp_path: Path, wire: Wire) -> None:
    limits = {"request_header_timeout": "1s", "keepalive_timeout": LONG}
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, limits, wire=wire)
        try:
            # Before the connection: the gateway's head timer starts once it is made, and a
            # test held up after connecting must not see the cut come early.
            connecting = time.monotonic()
            sock = connect(gateway.port, wire=wire)
            sock.sendall(b"POST /pay HTTP/1.1\r\n")
            started = time.monotonic()
            while not closed_by_peer(sock):
                assert time.monotonic() - started < 5, "a trickled head was never cut"
                try:
                    sock.sendall(b"X-Slow: y\r\n")
                except ConnectionError:
                    break
                await asyncio.sleep(0.1)
            assert time.monotonic() - connecting > 0.9
            sock.close()
        finally:
            gateway.stop()


async def test_a_body_that_pauses_or_trickles_is_cut_with_408(
    redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    limits = {
        "request_header_timeout": LONG,
        "keepalive_timeout": LONG,
        "request_body_gap_timeout": "1s",
        "request_body_timeout": "2s",
    }
    upstream = BigAnswers(10)
    async with serving(upstream) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, wire.closing(limits), wire=wire)
        try:
            # A pause longer than the gap.
            paused = connect(gateway.port, wire=wire)
            paused.sendall(request("/pay", "k1", b"x" * 100)[:-90])
            answer = await asyncio.to_thread(_answer_then_close, paused)
            assert answer.startswith(b"HTTP/1.1 408") and b'"code":"body-timeout"' in answer
            # A byte every 0.3 s: no gap is too long, the whole body is.
            trickled = connect(gateway.port, wire=wire)
            whole = request("/pay", "k2", b"x" * 100)
            trickled.sendall(whole[:-100])
            started = time.monotonic()
            for byte in range(100):
                if closed_by_peer(trickled):
                    break
                trickled.sendall(whole[-100 + byte : len(whole) - 99 + byte])
                await asyncio.sleep(0.3)
            assert 1.5 < time.monotonic() - started < 5
            answer = await asyncio.to_thread(_answer_then_close, trickled)
            assert answer.startswith(b"HTTP/1.1 408")
            assert upstream.count == 0  # nothing was forwarded, no key was claimed
            # Without a key the body streams to the upstream as it comes: cut all the same.
            unprotected = connect(gateway.port, wire=wire)
            unprotected.sendall(request("/pay", None, b"x" * 100)[:-90])
            answer = await asyncio.to_thread(_answer_then_close, unprotected)
            assert answer.startswith(b"HTTP/1.1 408") and b'"code":"body-timeout"' in answer
            status, _, _ = await one_answer(gateway.port, request("/pay", "k1"), tls=wire.client)
            assert status == 201
        finally:
            gateway.stop()


async def test_an_idle_connection_is_closed_after_the_keepalive_timeout(
    redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    limits = {"request_header_timeout": LONG, "keepalive_timeout": "1s"}
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, wire.closing(limits), wire=wire)
        try:
            sock = connect(gateway.port, wire=wire)
            sock.sendall(request("/pay", "k"))
            sock.settimeout(5)
            assert (await asyncio.to_thread(sock.recv, 1 << 16)).startswith(b"HTTP/1.1 201")
            waited = await until(lambda: closed_by_peer(sock), 5, "keep-alive timeout")
            assert waited > 0.5
            sock.close()
        finally:
            gateway.stop()


async def test_connections_past_the_limit_get_503(
    redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    limits = {"request_header_timeout": LONG, "keepalive_timeout": LONG, "max_connections": 3}
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, limits, wire=wire)
        try:
            held = [connect(gateway.port, wire=wire) for _ in range(3)]
            refused = connect(gateway.port, wire=wire)
            answer = await asyncio.to_thread(_answer_then_close, refused)
            assert answer.startswith(b"HTTP/1.1 503")
            assert b'"code":"too-many-connections"' in answer and b"Retry-After: 1" in answer
            held.pop().close()
            # Its place is free again once the gateway has seen it go.
            for _ in range(50):
                try:
                    status, _, _ = await one_answer(
                        gateway.port, request("/pay", "k"), tls=wire.client
                    )
                except (ConnectionError, asyncio.IncompleteReadError):
                    status = 0
                if status == 201:
                    break
                await asyncio.sleep(0.05)
            assert status == 201
            for sock in held:
                sock.close()
        finally:
            gateway.stop()


async def test_connections_per_upstream_are_capped(redis_url: str, tmp_path: Path) -> None:
    upstream = BigAnswers(10, delay=0.3)
    async with serving(upstream) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, {"upstream_connections": 2})
        try:
            answers = await asyncio.gather(
                *(one_answer(gateway.port, request("/pay", f"k{n}")) for n in range(6))
            )
            assert [status for status, _, _ in answers] == [201] * 6
            assert upstream.most_busy == 2 and upstream.connections == 2
        finally:
            gateway.stop()


def _answer_then_close(sock: socket.socket) -> bytes:
    """Everything the gateway sends until it closes the connection."""

    sock.settimeout(5)
    received = b""
    try:
        while chunk := sock.recv(1 << 16):
            received += chunk
    except ConnectionError:
        pass
    sock.close()
    return received


def _send_on_while_answered(port: int) -> tuple[bytes, BaseException | None]:
    """Send a head past the header limits and go on sending it, 4 MiB more, past any socket
    buffer; then read until the gateway closes. What was answered, and how it closed: None
    for a clean end (a FIN), else the error that ended sending or reading (a reset)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(b"POST /pay HTTP/1.1\r\nHost: gw\r\n" + b"X-H: v\r\n" * (1 << 19))
            while chunk := sock.recv(1 << 16):
                received += chunk
        except ConnectionError as reset:
            with contextlib.suppress(ConnectionError):
                received += sock.recv(1 << 16)
            return received, reset
    return received, None


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_a_client_still_sending_a_refused_head_reads_its_400(
    redis_url: str, tmp_path: Path, loop: str
) -> None:
    """A head refused while its client is still sending it: the gateway answers before it has
    read the rest (at once on Python 3.12, where aiohttp starts its tasks eagerly), then
    closes lingering, so that the client reads the 400 rather than a reset that drops it."""
    async with serving(BigAnswers(10)) as origin:
        gateway = start_gateway(origin, redis_url, tmp_path, {"keepalive_timeout": LONG}, loop=loop)
        try:
            reply, reset = await asyncio.to_thread(_send_on_while_answered, gateway.port)
        finally:
            gateway.stop()
    assert reset is None, f"the connection was reset after {reply[:12]!r}"
    assert reply[8:13] == b" 400 ", reply[:100]
    assert b'"code":"malformed-request"' in reply


async def test_limits_are_bound_at_start(
    make_gateway: GatewayFactory, upstream: tuple[object, str], redis_url: str, tmp_path: Path
) -> None:
    """The server's timers and counts were set up with them: a reload keeps them as they
    are (and says that a restart is needed)."""
    client = await make_gateway()
    app = client.server.app
    path = tmp_path / "reloaded.yaml"
    path.write_text(
        yaml.safe_dump({
            "redis": {"url": redis_url},
            "limits": {"max_connections": 7, "request_header_timeout": "2s"},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": upstream[1]}],
        })
    )  # fmt: skip
    assert apply(app, path)
    assert app[LIVE].settings.limits.max_connections == 4096
    assert app[LIVE].settings.limits.request_header_timeout == 10.0


def test_open_files_are_raised_for_max_connections_or_the_shortfall_is_said() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert fit_open_files(Limits(max_connections=300)) is None
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 300 + SPARE_FILES
        if hard != resource.RLIM_INFINITY:
            short = fit_open_files(Limits(max_connections=hard))
            assert short is not None and "limits.max_connections" in short
            assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
