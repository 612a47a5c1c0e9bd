"""One set of conformance tests for both upstream clients behind the `Answer` interface: the
httptools client and aiohttp's. Each answer is written as exact bytes by a scripted raw
upstream, over plain http and over TLS (https, a private CA both clients are configured to
trust); both clients must read it the same way and fail the same way."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ssl
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from multidict import CIMultiDict

from gateway.config.policy import Timeouts
from gateway.config.tls import UpstreamTls
from gateway.core.decision import Failure
from gateway.core.headers import MAX_FIELDS, MAX_HEAD
from gateway.upstream.aiohttp_client import AioAnswer
from gateway.upstream.base import UpstreamError, failure_of
from gateway.upstream.codings import PIECE
from gateway.upstream.httptools_conn import PooledAnswer
from gateway.upstream.upstreams import Outbound, Upstreams

from .scripted import Respond, Scripted, answering, scripted
from .tls_certs import PrivateCa, private_ca
from .upstream_clients import CLIENTS, Send

FAST = Timeouts(connect=1.0, total=0.5, read=0.5)


@dataclass(frozen=True)
class Client:
    """One client over one scheme: `serve` starts a scripted upstream it can reach, and
    calling it with that upstream's origin opens the client."""

    name: str
    scheme: str
    server_tls: ssl.SSLContext | None = None  # the upstream's, for https
    client_tls: ssl.SSLContext | None = None  # the gateway's: trusts the upstream's CA

    def __call__(self, origin: str) -> contextlib.AbstractAsyncContextManager[Send]:
        return CLIENTS[self.name](origin, self.client_tls)

    def serve(
        self, respond: Respond
    ) -> contextlib.AbstractAsyncContextManager[tuple[Scripted, str]]:
        return scripted(respond, self.server_tls)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> PrivateCa:
    return private_ca(Path(tmp_path_factory.mktemp("ca")))


@pytest.fixture(
    params=[(name, scheme) for name in sorted(CLIENTS) for scheme in ("http", "https")],
    ids="-".join,
)
def client(request: pytest.FixtureRequest, ca: PrivateCa) -> Client:
    name, scheme = request.param
    if scheme == "http":
        return Client(name, scheme)
    return Client(name, scheme, ca.server(), UpstreamTls(ca=ca.ca_file).context())


async def _exchange(
    client: Client, *chunks: bytes, method: str = "POST", keep: bool = True
) -> tuple[int, str, list[tuple[bytes, bytes]], bytes]:
    async with client.serve(answering(*chunks, keep=keep)) as (_, origin), client(origin) as send:
        answer = await send(method, "/pay", b"x" if method != "HEAD" else None, 1.0)
        async with answer:
            body = b""
            while chunk := await answer.read_chunk(1.0):
                body += chunk
            return answer.status, answer.reason, answer.raw_headers, body


async def _failure(client: Client, *chunks: bytes, total: float = 1.0) -> Failure:
    async with client.serve(answering(*chunks, keep=False)) as (_, origin), client(origin) as send:
        with pytest.raises(UpstreamError) as caught:
            answer = await send("POST", "/pay", b"x", total)
            async with answer:
                while await answer.read_chunk(total):
                    pass
        return failure_of(caught.value)


async def test_a_length_framed_answer(client: Client) -> None:
    raw = b"HTTP/1.1 201 Order Accepted\r\nX-B: 1\r\nX-B: 2\r\nContent-Length: 5\r\n\r\nhello"
    status, reason, headers, body = await _exchange(client, raw)
    assert (status, reason, body) == (201, "Order Accepted", b"hello")
    assert headers == [(b"X-B", b"1"), (b"X-B", b"2"), (b"Content-Length", b"5")]


async def test_a_chunked_answer_with_trailers_keeps_the_trailers_out_of_the_head(
    client: Client,
) -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\nX-T: late\r\n\r\n"
    )
    status, _, headers, body = await _exchange(client, raw)
    assert (status, body) == (200, b"abcde")
    assert (b"X-T", b"late") not in headers


async def test_a_close_delimited_answer_ends_at_the_close(client: Client) -> None:
    raw = b"HTTP/1.1 200 OK\r\nX-C: 1\r\n\r\nall of it until the close"
    status, _, _, body = await _exchange(client, raw, keep=False)
    assert (status, body) == (200, b"all of it until the close")


async def test_an_informational_answer_is_skipped(client: Client) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    raw = early + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    status, _, headers, body = await _exchange(client, raw)
    assert (status, body) == (200, b"ok")
    assert (b"Link", b"</a>") not in headers


async def test_a_204_has_no_body(client: Client) -> None:
    status, _, _, body = await _exchange(client, b"HTTP/1.1 204 No Content\r\nX-D: 1\r\n\r\n")
    assert (status, body) == (204, b"")


async def test_a_head_answer_has_no_body_whatever_its_length(
    client: Client, request: pytest.FixtureRequest
) -> None:
    if client.name == "httptools":
        pytest.skip("HEAD always goes over aiohttp's client (see the chooser's test below)")
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"
    status, _, headers, body = await _exchange(client, raw, method="HEAD")
    assert (status, body) == (200, b"")
    assert (b"Content-Length", b"10") in headers


async def test_nothing_listening_is_unsent(client: Client) -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    origin = f"{client.scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    server.close()
    await server.wait_closed()
    async with client(origin) as send:
        with pytest.raises(UpstreamError) as caught:
            await send("POST", "/pay", b"x", 1.0)
    assert failure_of(caught.value) is Failure.UNSENT


async def test_a_close_after_the_request_is_broken(client: Client) -> None:
    assert await _failure(client) is Failure.BROKEN


async def test_a_reset_mid_body_is_broken(client: Client) -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
    assert await _failure(client, cut) is Failure.BROKEN


async def test_no_head_in_time_is_a_timeout(client: Client) -> None:
    async def never(n: int, writer: asyncio.StreamWriter) -> bool:
        await asyncio.Event().wait()  # until the test's end closes the server
        return False

    async with client.serve(never) as (_, origin), client(origin) as send:
        with pytest.raises(UpstreamError) as caught:
            await send("POST", "/pay", b"x", 0.2)
    assert failure_of(caught.value) is Failure.TIMEOUT


async def test_a_stalled_body_is_a_timeout(client: Client) -> None:
    stall = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome"

    async def stalls(n: int, writer: asyncio.StreamWriter) -> bool:
        writer.write(stall)
        await writer.drain()
        await asyncio.Event().wait()
        return False

    async with client.serve(stalls) as (_, origin), client(origin) as send:
        answer = await send("POST", "/pay", b"x", 1.0)
        async with answer:
            assert await answer.read_chunk(1.0) == b"some"
            with pytest.raises(UpstreamError) as caught:
                await answer.read_chunk(0.2)
    assert failure_of(caught.value) is Failure.TIMEOUT


def _chunked(data: bytes, size: int = 7) -> bytes:
    pieces = [data[at : at + size] for at in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces) + b"0\r\n\r\n"


CONTENT = b'{"order": 1001, "state": "created"}' * 20


@pytest.mark.parametrize(
    ("coding", "coded"),
    [
        (b"gzip, chunked", gzip.compress(CONTENT)),
        (b"x-gzip, chunked", gzip.compress(CONTENT)),
        (b"deflate, chunked", zlib.compress(CONTENT)),
    ],
    ids=["gzip", "x-gzip", "deflate"],
)
async def test_a_transfer_coding_is_undone(client: Client, coding: bytes, coded: bytes) -> None:
    """A transfer coding is the hop's, not the content's: the body read is what the upstream
    coded, never its coded bytes (which no header would name once the framing is dropped)."""
    raw = b"HTTP/1.1 201 Created\r\nTransfer-Encoding: " + coding + b"\r\n\r\n" + _chunked(coded)
    status, _, _, body = await _exchange(client, raw)
    assert (status, body) == (201, CONTENT)


async def test_a_transfer_coding_until_the_close_is_undone(client: Client) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n" + gzip.compress(CONTENT)
    status, _, _, body = await _exchange(client, raw, keep=False)
    assert (status, body) == (200, CONTENT)


async def test_a_coded_body_that_inflates_hugely_comes_in_bounded_pieces(client: Client) -> None:
    content = bytes(32 << 20)
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
    raw += _chunked(gzip.compress(content), 64 << 10)
    async with client.serve(answering(raw)) as (_, origin), client(origin) as send:
        answer = await send("POST", "/pay", b"x", 1.0)
        async with answer:
            sizes = []
            while chunk := await answer.read_chunk(1.0):
                sizes.append(len(chunk))
    assert sum(sizes) == len(content)
    assert max(sizes) <= PIECE


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: compress, chunked\r\n\r\n" + _chunked(b"x"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, gzip, chunked\r\n\r\n" + _chunked(b"x"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + _chunked(b"not gzip"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        + _chunked(gzip.compress(CONTENT)[:-12]),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
        + _chunked(gzip.compress(CONTENT) + b"trailing"),
    ],
    ids=["unknown-coding", "two-codings", "not-gzip", "cut-short", "bytes-after-the-end"],
)
async def test_a_transfer_coding_that_cannot_be_undone_is_broken(
    client: Client, raw: bytes
) -> None:
    """The request ran, and its answer cannot be passed on as the upstream meant it: the
    outcome is unknown, never coded bytes handed on as the content."""
    assert await _failure(client, raw) is Failure.BROKEN


async def test_a_204_naming_a_transfer_coding_has_no_body(client: Client) -> None:
    raw = b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: gzip\r\n\r\n"
    status, _, _, body = await _exchange(client, raw)
    assert (status, body) == (204, b"")


async def _streamed() -> AsyncIterator[bytes]:
    yield b"x"


@pytest.mark.parametrize(
    ("scheme", "method", "body", "chosen"),
    [
        ("http", "POST", b"x", PooledAnswer),
        ("http", "GET", None, PooledAnswer),
        ("http", "HEAD", None, AioAnswer),
        ("http", "POST", "streamed", AioAnswer),
        ("https", "POST", b"x", PooledAnswer),
        ("https", "HEAD", None, AioAnswer),
        ("http+credentials", "POST", b"x", AioAnswer),
    ],
)
async def test_the_chooser_sends_only_what_the_httptools_client_serves(
    ca: PrivateCa, scheme: str, method: str, body: bytes | str | None, chosen: type
) -> None:
    """`Upstreams.send` to a real upstream: the httptools client carries a request to an
    http(s) origin whose body is in hand (or none) and that is not HEAD (its answer
    announces a body it does not send); aiohttp's client carries the rest."""
    tls = scheme == "https"
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    async with scripted(answering(raw), ca.server() if tls else None) as (_, origin):
        if scheme == "http+credentials":  # an origin the httptools client does not serve
            origin = origin.replace("http://", "http://user:secret@")
        upstreams = Upstreams([origin], tls=UpstreamTls(ca=ca.ca_file).context() if tls else None)
        headers: CIMultiDict[str] = CIMultiDict()
        sent: bytes | AsyncIterator[bytes] | None
        if body == "streamed":
            headers["Content-Length"] = "1"
            sent = _streamed()
        else:
            sent = body if not isinstance(body, str) else None
        try:
            answer = await upstreams.send(Outbound(origin, method, "/pay", headers, sent, FAST))
            async with answer:
                assert answer.status == 200
            assert type(answer) is chosen
        finally:
            await upstreams.close()


def _head(*lines: bytes) -> bytes:
    return b"\r\n".join(lines) + b"\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(
    "raw",
    [
        _head(b"HTTP/1.1 200 OK", *(b"X-H%d: v" % i for i in range(MAX_FIELDS - 1))),
        _head(b"HTTP/1.1 200 OK", b"X-Long: " + b"v" * (MAX_HEAD // 2)),
        _head(b"HTTP/1.1 200 " + b"r" * (MAX_HEAD // 2)),
    ],
    ids=["most-lines", "long-value", "long-reason"],
)
async def test_a_head_at_the_shared_limits_is_read(client: Client, raw: bytes) -> None:
    """aiohttp's own limits (8190 bytes a line, 128 lines) are raised to the httptools client's
    (a 1 MiB head, 1000 lines):
    an answer one client reads, the other reads too."""
    status, _, headers, body = await _exchange(client, raw)
    assert (status, body) == (200, b"ok")
    assert headers[-1] == (b"Content-Length", b"2")


@pytest.mark.parametrize(
    "raw",
    [
        _head(b"HTTP/1.1 200 OK", *(b"X-H%d: v" % i for i in range(MAX_FIELDS))),
        _head(b"HTTP/1.1 200 OK", b"X-Long: " + b"v" * MAX_HEAD),
        _head(b"HTTP/1.1 200 " + b"r" * (MAX_HEAD + 1)),
        _head(b"HTTP/1.1 200 OK", *(b"X-H%d: " % i + b"v" * 4000 for i in range(300))),
    ],
    ids=["too-many-lines", "too-long-value", "too-long-reason", "too-long-head"],
)
async def test_a_head_past_the_shared_limits_is_broken(client: Client, raw: bytes) -> None:
    assert await _failure(client, raw) is Failure.BROKEN
