"""https:// upstreams: both clients verify the upstream's certificate with the context made
from `upstream_tls`, a refused certificate is a failure before anything was sent (the key is
released), and a TLS connection cut after sending leaves the outcome unknown and is never
sent again. The upstreams are real TLS servers on loopback with trustme's certificates."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
import uvloop
import yaml
import yarl

from gateway.config.tls import UpstreamTls
from gateway.core.decision import Failure
from gateway.upstream.base import UpstreamError, failure_of
from gateway.upstream.httptools_client import UpstreamPool
from testkit.procs import GatewayProcess

from .gateways import GatewayFactory, gateway_settings
from .loopback import loopback_server
from .orders import Orders, reconcile_config
from .rawhttp import exchange
from .scripted import Scripted, answering, scripted
from .tls_certs import PrivateCa, private_ca
from .upstream import serving_app
from .upstream_clients import CLIENTS

OK = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-Run: 1\r\n\r\nok"


@pytest.fixture
def ca(tmp_path: Path) -> PrivateCa:
    return private_ca(tmp_path / "ca")


@pytest.fixture
def stranger(tmp_path: Path) -> PrivateCa:
    """Another private CA, that nothing is configured to trust."""
    return private_ca(tmp_path / "stranger")


async def _call(kind: str, origin: str, tls: ssl.SSLContext, times: int = 1) -> list[bytes]:
    """Send `times` POSTs over one client of `kind`; the bodies of the answers."""
    bodies = []
    async with CLIENTS[kind](origin, tls) as send:
        for _ in range(times):
            async with await send("POST", "/pay", b"x", 2.0) as answer:
                body = b""
                while chunk := await answer.read_chunk(2.0):
                    body += chunk
                bodies.append(body)
    return bodies


async def _refused(kind: str, server: ssl.SSLContext, client: ssl.SSLContext) -> Scripted:
    """Call an upstream whose certificate `client` must refuse: unsent, and nothing read."""
    async with scripted(answering(OK), server) as (upstream, origin):
        with pytest.raises(UpstreamError) as caught:
            await _call(kind, origin, client)
    assert failure_of(caught.value) is Failure.UNSENT, caught.value
    assert "certificate" in str(caught.value).lower()
    assert upstream.requests == [] and upstream.connections == 0
    return upstream


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_certificate_for_another_name_is_refused_and_nothing_is_forwarded(
    kind: str, ca: PrivateCa
) -> None:
    trusting = UpstreamTls(ca=ca.ca_file).context()
    await _refused(kind, ca.server("billing.test"), trusting)


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_an_untrusted_ca_is_refused(kind: str, ca: PrivateCa, stranger: PrivateCa) -> None:
    await _refused(kind, stranger.server(), UpstreamTls().context())  # the system's store
    await _refused(kind, stranger.server(), UpstreamTls(ca=ca.ca_file).context())


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_private_ca_configured_is_accepted_and_the_name_sent(
    kind: str, ca: PrivateCa
) -> None:
    server = ca.server("localhost")
    names: list[str | None] = []
    server.sni_callback = lambda sock, name, context: names.append(name)
    async with scripted(answering(OK), server) as (upstream, origin):
        origin = origin.replace("127.0.0.1", "localhost")
        assert await _call(kind, origin, UpstreamTls(ca=ca.ca_file).context()) == [b"ok"]
    assert names == ["localhost"]  # SNI
    assert upstream.requests[0][0].split(b"\r\n")[0] == b"POST /pay HTTP/1.1"


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_a_handshake_never_answered_is_unsent_at_the_connect_timeout(kind: str) -> None:
    """A port that accepts the connection but never speaks TLS: the handshake is part of
    connecting, bounded by `timeouts.connect` (1 s here), and nothing was sent."""
    received = bytearray()
    done = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            received.extend(await reader.read(65536))  # the ClientHello, then nothing more
            await reader.read()  # until the client gives up
        finally:
            writer.close()
            done.set()

    async with loopback_server(silent) as server:
        origin = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        started = asyncio.get_running_loop().time()
        with pytest.raises(UpstreamError) as caught:
            await _call(kind, origin, UpstreamTls().context())
        elapsed = asyncio.get_running_loop().time() - started
        await asyncio.wait_for(done.wait(), 5)  # the client closed its end
    assert failure_of(caught.value) is Failure.UNSENT
    assert 0.9 < elapsed < 1.9
    assert received[:1] == b"\x16" and b"POST" not in received  # a handshake record only


async def test_over_tls_the_httptools_client_sends_what_aiohttp_sends(ca: PrivateCa) -> None:
    tls = UpstreamTls(ca=ca.ca_file).context()
    headers = [("X-Forwarded-For", "127.0.0.1"), ("Idempotency-Key", "k")]
    async with scripted(answering(OK), ca.server()) as (upstream, origin):
        origin = origin.replace("127.0.0.1", "localhost")
        pool = UpstreamPool(origin, 8, tls)
        async with await pool.request("POST", "/pay?a=%2F", headers, b"body", 2.0, 2.0):
            pass
        pool.close()
        skipped = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
        async with aiohttp.ClientSession(skip_auto_headers=skipped) as session:
            url = yarl.URL(origin + "/pay?a=%2F", encoded=True)
            async with session.post(url, headers=headers, data=b"body", ssl=tls) as theirs:
                await theirs.read()
    ours, aiohttps = upstream.requests
    assert sorted(ours[0].split(b"\r\n")) == sorted(aiohttps[0].split(b"\r\n"))
    assert ours[1] == aiohttps[1] == b"body"


@pytest.mark.parametrize(
    ("origin", "host"),
    [
        ("https://api.test", b"api.test"),
        ("https://api.test:443", b"api.test"),
        ("https://api.test:8443", b"api.test:8443"),
        ("https://[::1]:443/base", b"[::1]"),
    ],
)
def test_the_host_header_names_the_port_only_when_it_is_not_https_s_own(
    origin: str, host: bytes
) -> None:
    head = UpstreamPool(origin, 1)._head("POST", "/pay", [], 0)
    assert head.split(b"\r\n")[1] == b"Host: " + host  # as aiohttp writes it


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_verify_off_accepts_any_certificate(kind: str, stranger: PrivateCa) -> None:
    async with scripted(answering(OK), stranger.server("billing.test")) as (_, origin):
        assert await _call(kind, origin, UpstreamTls(verify=False).context()) == [b"ok"]


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_the_client_certificate_configured_is_presented(
    kind: str, ca: PrivateCa, stranger: PrivateCa
) -> None:
    """An upstream that requires a client certificate of its own CA (mutual TLS)."""
    cert, key = stranger.client_files()
    tls = UpstreamTls(ca=ca.ca_file, cert=cert, key=key).context()
    async with scripted(answering(OK), ca.server(client_ca=stranger.ca)) as (upstream, origin):
        assert await _call(kind, origin, tls) == [b"ok"]
        with pytest.raises(UpstreamError):  # without it, the upstream refuses the connection
            await _call(kind, origin, UpstreamTls(ca=ca.ca_file).context())
    assert len(upstream.requests) == 1  # the refused one never reached the application


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_keep_alive_reuses_one_tls_connection(kind: str, ca: PrivateCa) -> None:
    async with scripted(answering(OK), ca.server()) as (upstream, origin):
        tls = UpstreamTls(ca=ca.ca_file).context()
        assert await _call(kind, origin, tls, times=3) == [b"ok"] * 3
    assert upstream.connections == 1 and len(upstream.requests) == 3


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_the_upstream_closing_tls_mid_answer_is_unknown_and_not_resent(
    kind: str, ca: PrivateCa
) -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part"
    async with scripted(answering(cut, keep=False), ca.server()) as (upstream, origin):
        with pytest.raises(UpstreamError) as caught:
            await _call(kind, origin, UpstreamTls(ca=ca.ca_file).context())
        await upstream.closed_at_least(1)
    assert failure_of(caught.value) is Failure.BROKEN
    assert len(upstream.requests) == 1 and upstream.connections == 1


def test_a_tls_exchange_under_uvloop(tmp_path: Path) -> None:
    """The gateway's default loop: uvloop's own TLS transport, reused, and a refusal."""
    ca = private_ca(tmp_path)

    async def exchanges() -> tuple[list[bytes], int, Failure]:
        tls = UpstreamTls(ca=ca.ca_file).context()
        async with scripted(answering(OK), ca.server()) as (upstream, origin):
            bodies = await _call("httptools", origin, tls, times=2)
        async with scripted(answering(OK), ca.server("billing.test")) as (_, origin):
            pool = UpstreamPool(origin, 8, tls)
            try:
                await pool.request("POST", "/pay", [], b"x", 2.0, 2.0)
            except UpstreamError as exc:
                refused = failure_of(exc)
            finally:
                pool.close()
        return bodies, upstream.connections, refused

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(exchanges()) == ([b"ok", b"ok"], 1, Failure.UNSENT)


REQUEST = (
    b"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: %s\r\n"
    b"Content-Length: 1\r\n\r\nx"
)


async def test_a_refused_certificate_through_the_gateway_is_unreachable_and_released(
    make_gateway: GatewayFactory, ca: PrivateCa, tmp_path: Path
) -> None:
    async with scripted(answering(OK), ca.server("billing.test")) as (upstream, origin):
        trust = {"ca": ca.ca_file}
        settings = gateway_settings(origin, upstream_tls=trust, on_unknown_outcome="keep")
        gateway = await make_gateway(settings=settings)
        for _ in range(2):  # released, so the retry is tried again (no 409 meanwhile)
            reply = await exchange(gateway.port, REQUEST % b"k1")
            assert reply.startswith(b"HTTP/1.1 502 ")
            problem = orjson.loads(reply.split(b"\r\n\r\n", 1)[1])
            assert problem["code"] == "upstream-unreachable"
    assert upstream.connections == 0 and upstream.requests == []


async def test_a_tls_cut_through_the_gateway_is_recorded_unknown_and_never_resent(
    make_gateway: GatewayFactory, ca: PrivateCa
) -> None:
    cut = b"HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\nonly part"
    async with scripted(answering(cut, keep=False), ca.server()) as (upstream, origin):
        trust = {"ca": ca.ca_file}
        settings = gateway_settings(origin, upstream_tls=trust, on_unknown_outcome="record")
        gateway = await make_gateway(settings=settings)
        first = await exchange(gateway.port, REQUEST % b"k2")
        retry = await exchange(gateway.port, REQUEST % b"k2")
    for reply in (first, retry):
        assert reply.startswith(b"HTTP/1.1 502 ") and b"Idempotency-Outcome: unknown" in reply
    assert b"Idempotent-Replayed: true" in retry
    assert len(upstream.requests) == 1


async def test_a_reconcile_lookup_over_https_trusts_what_the_upstreams_trust(
    make_gateway: GatewayFactory, ca: PrivateCa
) -> None:
    orders = Orders()
    async with serving_app(orders.app(), ca.server()) as origin:
        assert origin.startswith("https://")
        lookup = reconcile_config(origin)
        settings = gateway_settings(origin, upstream_tls={"ca": ca.ca_file}, reconcile=lookup)
        gateway = await make_gateway(settings=settings)
        orders.cut = "after"  # the order is made, its answer lost: only the lookup can tell
        answer = await gateway.post("/orders", data=b"{}", headers={"Idempotency-Key": "r1"})
        assert answer.status == 201
        assert answer.headers["Idempotency-Outcome"] == "reconciled"
    assert orders.runs["r1"] == 1 and orders.lookups == [("r1", None)]


@pytest.fixture
async def tls_upstream(ca: PrivateCa) -> AsyncIterator[tuple[Scripted, str]]:
    answer = (
        b"HTTP/1.1 201 Order Accepted\r\nX-B: 1\r\nx-lower: a  b\r\nX-B: 2\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    async with scripted(answering(answer), ca.server()) as served:
        yield served


async def test_an_https_upstream_end_to_end_through_a_gateway_process_replays_byte_for_byte(
    redis_url: str, ca: PrivateCa, tmp_path: Path, tls_upstream: tuple[Scripted, str]
) -> None:
    upstream, origin = tls_upstream
    config = {
        "redis": {"url": redis_url},
        "blob": {"url": f"file://{tmp_path}/blobs"},
        "log_level": "warning",
        "upstream_tls": {"ca": ca.ca_file},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path)
    await asyncio.to_thread(gateway.start)
    try:
        first = await exchange(gateway.port, REQUEST % b"e2e")
        replay = await exchange(gateway.port, REQUEST % b"e2e")
    finally:
        assert await asyncio.to_thread(gateway.stop) == 0
    assert len(upstream.requests) == 1
    assert first.startswith(b"HTTP/1.1 201 Order Accepted\r\n")
    assert _without(replay, b"idempotent-replayed:") == _without(first, b"")
    assert _without(first, b"")[1] == b"hello world"


def _without(reply: bytes, marker: bytes) -> tuple[list[bytes], bytes]:
    """The reply's head lines but the ones that differ by nature (its date, request id,
    the replay marker, the body's framing, and the expiry: the first answer's counts from
    its head, a replay's from the record's completion, a second later across a tick), and
    its body, de-chunked."""
    head, body = reply.split(b"\r\n\r\n", 1)
    skip = (b"date:", b"x-request-id:", b"transfer-encoding:", b"content-length:")
    skip += (b"idempotency-expires:",)
    lines = [
        line
        for line in head.split(b"\r\n")
        if not line.lower().startswith(skip) and not (marker and line.lower().startswith(marker))
    ]
    return lines, _dechunked(body) if b"chunked" in head.lower() else body


def _dechunked(body: bytes) -> bytes:
    out = b""
    while True:
        size, rest = body.split(b"\r\n", 1)
        if int(size, 16) == 0:
            return out
        out += rest[: int(size, 16)]
        body = rest[int(size, 16) + 2 :]


@pytest.mark.parametrize(
    ("tls", "says"),
    [
        ({"ca": "/nonexistent/ca.pem"}, "upstream_tls: ca '/nonexistent/ca.pem' cannot be loaded"),
        ({"cert": "{bad}"}, "upstream_tls: cert '{bad}' cannot be loaded"),
        ({"key": "{key}"}, "upstream_tls: key needs cert"),
        ({"cert": "{cert}", "key": "{bad}"}, "with key '{bad}' cannot be loaded"),
    ],
)
def test_an_unusable_tls_file_is_one_line_at_check(
    tls: dict[str, str], says: str, ca: PrivateCa, tmp_path: Path
) -> None:
    cert, key = ca.client_files()
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("hello\n")
    names = {"{bad}": str(bad), "{cert}": cert, "{key}": key}
    tls = {field: names.get(value, value) for field, value in tls.items()}
    says = says.replace("{bad}", str(bad))
    path = tmp_path / "gw.yaml"
    route = {"name": "api", "path_prefix": "/", "upstream": "https://127.0.0.1:1"}
    path.write_text(yaml.safe_dump({"upstream_tls": tls, "routes": [route]}))
    run = subprocess.run(
        [sys.executable, "-m", "gateway", "--check", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert says in run.stderr, run.stderr
