"""A hostile or broken TLS upstream against the httptools client's https:// path: raw sockets
wrapped with `ssl` on the server side, so the test decides what TLS itself does (close_notify
or a bare TCP close, a close_notify never answered). Each upstream counts executions: the
requests whose bytes its application read."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import select
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvloop
import yaml
from cryptography.hazmat.primitives import serialization
from multidict import CIMultiDict

from gateway.config.policy import Timeouts
from gateway.config.tls import UpstreamTls
from gateway.core.decision import Failure
from gateway.upstream import aiohttp_client
from gateway.upstream.base import UpstreamError, failure_of
from gateway.upstream.httptools_client import UpstreamPool
from testkit.polling import until

from .gateways import GatewayFactory, gateway_settings
from .rawhttp import exchange
from .tls_certs import PrivateCa, private_ca

Handler = Callable[[ssl.SSLSocket, "RawTlsUpstream"], None]


class RawTlsUpstream:
    """A TLS server on loopback run by a thread per connection: `handler(tls, self)` does
    what it likes with the wrapped socket. `executions` counts requests read whole."""

    def __init__(self, context: ssl.SSLContext, handler: Handler) -> None:
        self._context = context
        self._handler = handler
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.origin = f"https://127.0.0.1:{self._listener.getsockname()[1]}"
        self.executions = 0
        self.events: dict[str, float] = {}  # what the upstream saw, and when (monotonic)
        self._threads: list[threading.Thread] = []
        self._sockets: list[ssl.SSLSocket] = []

    def read_request(self, tls: ssl.SSLSocket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            data += tls.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += tls.recv(65536)
        self.executions += 1
        return head

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return  # the listener was closed: the test is over
            thread = threading.Thread(target=self._serve, args=(raw,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, raw: socket.socket) -> None:
        with (
            contextlib.suppress(OSError),
            raw,
            self._context.wrap_socket(raw, server_side=True) as tls,
        ):
            self._sockets.append(tls)
            self._handler(tls, self)

    @contextlib.contextmanager
    def running(self) -> Iterator[RawTlsUpstream]:
        acceptor = threading.Thread(target=self._accept, daemon=True)
        acceptor.start()
        try:
            yield self
        finally:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            self._listener.close()
            for tls in self._sockets:
                with contextlib.suppress(OSError):
                    tls.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked on it
            for thread in (acceptor, *self._threads):
                thread.join(5)


REQUEST = (
    b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: %s\r\n"
    b"Content-Length: 1\r\n\r\nx"
)


@pytest.fixture
def ca(tmp_path: Path) -> PrivateCa:
    return private_ca(tmp_path / "ca")


def _trusting(ca: PrivateCa) -> ssl.SSLContext:
    return UpstreamTls(ca=ca.ca_file).context()


async def _post(pool: UpstreamPool) -> bytes | Failure:
    """One POST through the httptools client: the whole body it read, or how it failed."""
    try:
        async with await pool.request("POST", "/pay", [], b"x", 2.0, 2.0) as answer:
            body = b""
            while chunk := await answer.read_chunk(2.0):
                body += chunk
            return body
    except UpstreamError as exc:
        return failure_of(exc)


UNFRAMED = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe first half"


def _answer_then_close(close_notify: bool) -> Handler:
    """Answers without a length, then ends TLS with close_notify, or closes TCP bare."""

    def handler(tls: ssl.SSLSocket, upstream: RawTlsUpstream) -> None:
        upstream.read_request(tls)
        tls.sendall(UNFRAMED)
        if close_notify:
            with contextlib.suppress(OSError):
                tls.unwrap().close()
        else:
            tls.close()  # SSLSocket.close sends no close_notify: a truncation

    return handler


async def _unframed(ca: PrivateCa, close_notify: bool) -> tuple[bytes | Failure, int]:
    with RawTlsUpstream(ca.server(), _answer_then_close(close_notify)).running() as upstream:
        pool = UpstreamPool(upstream.origin, 4, _trusting(ca))
        try:
            return await _post(pool), upstream.executions
        finally:
            pool.close()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_body_without_length_cut_without_close_notify_is_unknown_not_complete(
    loop: str, ca: PrivateCa
) -> None:
    """RFC 9112 9.8: over TLS only close_notify ends a body that has no length; a bare TCP
    close may be a cut. Read as the end, the cut body would be recorded and replayed as the
    upstream's whole answer. With close_notify the same bytes are the complete answer."""
    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        cut, cut_runs = runner.run(_unframed(ca, close_notify=False))
        ended, ended_runs = runner.run(_unframed(ca, close_notify=True))
    assert (cut, cut_runs) == (Failure.BROKEN, 1)
    assert (ended, ended_runs) == (b"the first half", 1)


def _socket_fds() -> int:
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:") for fd in _fds())


def _fds() -> list[str]:
    with contextlib.suppress(FileNotFoundError):
        return os.listdir("/proc/self/fd")
    return []


def _answer_then_hold(closing: bool) -> Handler:
    """Answers, then reads the client's close_notify and never answers it, holding the TCP
    connection open: records when the client's close_notify and its TCP close arrive."""

    def handler(tls: ssl.SSLSocket, upstream: RawTlsUpstream) -> None:
        upstream.read_request(tls)
        close = b"Connection: close\r\n" if closing else b""
        tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + close + b"\r\nok")
        upstream.events["answered"] = time.monotonic()
        assert tls.recv(1) == b""  # the client's close_notify
        upstream.events["close_notify"] = time.monotonic()
        with socket.socket(fileno=os.dup(tls.fileno())) as raw:  # under TLS: the TCP itself
            raw.settimeout(40)
            raw.recv(1)  # b"" at the client's FIN; a timeout when it never comes
        upstream.events["closed"] = time.monotonic()

    return handler


@pytest.mark.parametrize("closing", [True, False], ids=["connection-close", "idle-at-close"])
async def test_a_close_notify_the_upstream_never_answers_frees_the_connection_promptly(
    closing: bool, ca: PrivateCa
) -> None:
    """asyncio waits 30 s for the upstream's close_notify before it closes the socket: an
    upstream that ends every answer with `Connection: close` and then holds its end open
    would pin one fd in the gateway per request for that long (thousands at a modest rate).
    The gateway sends close_notify, then closes the connection within seconds."""
    with RawTlsUpstream(ca.server(), _answer_then_hold(closing)).running() as upstream:
        pool = UpstreamPool(upstream.origin, 4, _trusting(ca))
        assert await _post(pool) == b"ok"
        pool.close()  # closes the idle connection, when it was kept
        await until(
            lambda: "closed" in upstream.events,
            6,
            "the connection closing after its answer",
            every=0.05,
        )
        events = dict(upstream.events)
    assert "close_notify" in events, events
    assert events["closed"] - events["answered"] < 3.5
    assert upstream.executions == 1


async def test_a_cut_body_through_the_gateway_is_recorded_unknown_never_replayed_as_whole(
    make_gateway: GatewayFactory, ca: PrivateCa
) -> None:
    """The same cut, end to end: the retry replays the unknown outcome, not the cut bytes
    as a 200, and the upstream ran the operation once."""
    handler = _answer_then_close(close_notify=False)
    with RawTlsUpstream(ca.server(), handler).running() as upstream:
        trust = {"ca": ca.ca_file}
        settings = gateway_settings(
            upstream.origin, upstream_tls=trust, on_unknown_outcome="record"
        )
        gateway = await make_gateway(settings=settings)
        first = await exchange(gateway.port, REQUEST % b"cut")
        retry = await exchange(gateway.port, REQUEST % b"cut")
    assert upstream.executions == 1
    for reply in (first, retry):  # before the fix: 200 and "the first half", both times
        assert reply.startswith(b"HTTP/1.1 502 ") and b"Idempotency-Outcome: unknown" in reply
    assert b"Idempotent-Replayed: true" in retry


async def test_aiohttp_s_client_too_frees_a_connection_whose_close_notify_is_never_answered(
    ca: PrivateCa,
) -> None:
    """The same hold against aiohttp's client (streamed bodies, HEAD): the gateway sets its
    private `_ssl_shutdown_timeout`, and this test fails when aiohttp stops reading it."""
    with RawTlsUpstream(ca.server(), _answer_then_hold(closing=True)).running() as upstream:
        session = aiohttp_client.session(4, _trusting(ca))
        try:
            timeouts = Timeouts(connect=2.0, total=2.0, read=2.0)
            headers: CIMultiDict[str] = CIMultiDict()
            url = upstream.origin + "/pay"
            async with await aiohttp_client.send(
                session, "POST", url, headers, b"x", timeouts
            ) as answer:
                assert await answer.read_chunk(2.0) == b"ok"
            await until(
                lambda: "closed" in upstream.events,
                6,
                "the connection closing after its answer",
                every=0.05,
            )
            events = dict(upstream.events)
        finally:
            await session.close()
    assert events["closed"] - events["answered"] < 3.5
    assert upstream.executions == 1


def _encrypted_key_config(ca: PrivateCa, folder: Path) -> Path:
    """A config whose client certificate's key is encrypted with a passphrase."""
    cert, key = ca.client_files()
    loaded = serialization.load_pem_private_key(Path(key).read_bytes(), password=None)
    locked = loaded.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    Path(key).write_bytes(locked)
    route = {"name": "api", "path_prefix": "/", "upstream": "https://127.0.0.1:1"}
    path = folder / "gw.yaml"
    path.write_text(yaml.safe_dump({"upstream_tls": {"cert": cert, "key": key}, "routes": [route]}))
    return path


def test_an_encrypted_client_key_is_one_line_at_check_even_at_a_terminal(
    ca: PrivateCa, tmp_path: Path
) -> None:
    """OpenSSL asks the controlling terminal for a passphrase when a key is encrypted and no
    password callback is set: `--check` (and the start) at an operator's terminal stopped at
    "Enter PEM pass phrase:" and waited. The gateway has no passphrase to give: one line."""
    path = _encrypted_key_config(ca, tmp_path)
    pid, terminal = pty.fork()  # the child's controlling terminal is this pty
    if pid == 0:
        try:
            os.execv(sys.executable, [sys.executable, "-m", "gateway", "--check", str(path)])
        finally:
            os._exit(127)
    output, status = b"", None
    deadline = time.monotonic() + 10
    try:
        while status is None and time.monotonic() < deadline:
            if select.select([terminal], [], [], 0.1)[0]:
                with contextlib.suppress(OSError):  # EIO once the child has gone
                    output += os.read(terminal, 4096)
            done, code = os.waitpid(pid, os.WNOHANG)
            status = os.waitstatus_to_exitcode(code) if done else None
    finally:
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(terminal)
    text = output.decode(errors="replace")
    assert status == 2, f"--check still running after 10 s: {text!r}"
    assert "pass phrase" not in text.lower(), text
    assert text.strip().count("\n") == 0 and "Traceback" not in text
    assert "encrypted" in text, text
