"""HTTPS on the gateway's own listeners (`listen.tls`, `admin.tls`), against real TLS clients:
the README walk-through over HTTPS, curl with `--cacert`, mutual TLS on the admin port (a
client certificate's subject read as `openssl -nameopt RFC2253` prints it), and `--check`
refusing certificate files that cannot serve."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from gateway.http.server.client_cert import subject_of
from testkit.ports import Port, wait_for_port
from testkit.procs import GatewayProcess

from .gateways import ADMIN_TOKEN
from .tls_certs import PrivateCa, private_ca
from .upstream import CountingUpstream, serving_app
from .walkthrough import ROOT, walk_through


@pytest.fixture
def server_ca(tmp_path: Path) -> PrivateCa:
    return private_ca(tmp_path / "server-ca")


def client_context(ca: PrivateCa, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca.ca_file)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


def tls_request(port: int, context: ssl.SSLContext, data: bytes, timeout: float = 10.0) -> bytes:
    """Send `data` over TLS; everything that comes back until the gateway closes."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(data)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
        return answer


@pytest.fixture
def demo_over_https(tmp_path: Path, server_ca: PrivateCa) -> Iterator[int]:
    """The demo upstream and the README's gateway (config/gateway.example.yaml) with
    `listen.tls` added, on the embedded default Redis."""
    cert, key = server_ca.leaf_files("gateway")
    config = yaml.safe_load((ROOT / "config" / "gateway.example.yaml").read_text())
    config["listen"]["tls"] = {"cert": cert, "key": key}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    demo_hold, public = Port(), Port()  # each process binds its port beside the hold
    demo_port, port = demo_hold.number, public.number
    env = {**os.environ, "IDEM_PORT": str(port), "DEMO_UPSTREAM": f"http://127.0.0.1:{demo_port}"}
    env.pop("IDEM_REDIS_URL", None)
    with open(tmp_path / "out.log", "wb") as log:
        demo = subprocess.Popen(
            [sys.executable, "-m", "gateway.demo_upstream", "--port", str(demo_port)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        gateway = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--workers", "1", "--config", str(path)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            wait_for_port(demo_port, process=demo)
            wait_for_port(port, process=gateway)
            yield port
        finally:
            for process in (gateway, demo):
                process.terminate()
                process.wait(timeout=30)
    text = (tmp_path / "out.log").read_text()
    assert f"listening on https://127.0.0.1:{port}" in text
    assert "Traceback" not in text


async def test_the_readme_walkthrough_runs_over_https(
    demo_over_https: int, server_ca: PrivateCa
) -> None:
    await walk_through(demo_over_https, client_context(server_ca))


async def test_a_retry_over_https_replays_the_first_answer_byte_for_byte(
    demo_over_https: int, server_ca: PrivateCa
) -> None:
    """Python's ssl on a raw socket: the retry's bytes are the first answer's, but for the
    headers that differ on every answer and the replay marker."""
    request = (
        b"POST /payments HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: tls-raw-1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 17\r\nConnection: close\r\n\r\n"
        b'{"amount": 12.50}'
    )
    context = client_context(server_ca)
    first = await asyncio.to_thread(tls_request, demo_over_https, context, request)
    again = await asyncio.to_thread(tls_request, demo_over_https, context, request)
    assert first.startswith(b"HTTP/1.1 201 Created\r\n")
    changing = (b"date:", b"x-request-id:", b"idempotency-expires:")
    replay_marker = b"Idempotent-Replayed: true\r\n"

    def steady(answer: bytes) -> bytes:
        head, _, body = answer.partition(b"\r\n\r\n")
        kept = [line for line in head.split(b"\r\n") if not line.lower().startswith(changing)]
        return b"\r\n".join(kept) + b"\r\n\r\n" + body

    assert replay_marker in again
    assert steady(again).replace(replay_marker, b"") == steady(first)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed here")
async def test_curl_with_cacert_gets_the_answer_and_its_replay(
    demo_over_https: int, server_ca: PrivateCa, tmp_path: Path
) -> None:
    url = f"https://127.0.0.1:{demo_over_https}/payments"

    def curl(name: str) -> tuple[bytes, bytes]:
        head, body = tmp_path / f"{name}.head", tmp_path / f"{name}.body"
        subprocess.run(
            ["curl", "-sS", "--cacert", server_ca.ca_file, "-X", "POST", url,
             "-H", "Idempotency-Key: curl-tls-1", "-H", "Content-Type: application/json",
             "-d", '{"amount": 100, "currency": "EUR"}', "-D", str(head), "-o", str(body)],
            check=True, timeout=30,
        )  # fmt: skip
        return head.read_bytes(), body.read_bytes()

    first_head, first_body = await asyncio.to_thread(curl, "first")
    retry_head, retry_body = await asyncio.to_thread(curl, "retry")
    assert first_head.startswith(b"HTTP/1.1 201 Created\r\n")
    assert b"Idempotent-Replayed: true" in retry_head
    assert retry_body == first_body
    assert orjson.loads(first_body)["idempotency_key_seen"] == "curl-tls-1"


def start(tmp_path: Path, redis_url: str, origin: str, **sections: Any) -> GatewayProcess:
    config: dict[str, Any] = {
        "redis": {"url": redis_url},
        "blob": {"url": f"file://{tmp_path}/blobs"},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        **sections,
    }
    return GatewayProcess(config, tmp_path).start()


async def test_requests_that_came_over_tls_are_forwarded_with_proto_https(
    redis_url: str, tmp_path: Path, server_ca: PrivateCa
) -> None:
    counting = CountingUpstream()
    cert, key = server_ca.leaf_files("gateway")
    async with serving_app(counting.app()) as origin:
        gateway = start(tmp_path, redis_url, origin, listen={"tls": {"cert": cert, "key": key}})
        try:
            request = b"POST /echo HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n"
            request += b"Connection: close\r\n\r\n"
            answer = await asyncio.to_thread(
                tls_request, gateway.port, client_context(server_ca), request
            )
        finally:
            gateway.stop()
    assert answer.startswith(b"HTTP/1.1 200 ")
    seen = counting.seen_headers[-1]
    assert seen["X-Forwarded-Proto"] == "https"
    assert seen["X-Forwarded-Host"] == "gw"  # as over plain HTTP


async def test_min_version_and_alpn_are_the_listeners(
    redis_url: str, tmp_path: Path, server_ca: PrivateCa
) -> None:
    """`min_version: TLSv1.3` refuses a TLS 1.2 client; ALPN picks http/1.1 for a client
    that offers h2 first."""
    cert, key = server_ca.leaf_files("gateway")
    tls = {"cert": cert, "key": key, "min_version": "TLSv1.3"}
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        gateway = start(tmp_path, redis_url, origin, listen={"tls": tls})
        try:

            def handshake(maximum: ssl.TLSVersion) -> str | None:
                context = client_context(server_ca)
                context.maximum_version = maximum
                context.set_alpn_protocols(["h2", "http/1.1"])
                with (
                    socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as raw,
                    context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
                ):
                    return tls.selected_alpn_protocol()

            assert await asyncio.to_thread(handshake, ssl.TLSVersion.TLSv1_3) == "http/1.1"
            with pytest.raises(ssl.SSLError):  # the loop closes it, with no alert
                await asyncio.to_thread(handshake, ssl.TLSVersion.TLSv1_2)
        finally:
            gateway.stop()


# Mutual TLS on the admin listener.


@pytest.fixture
async def mtls_admin(redis_url: str, tmp_path: Path, server_ca: PrivateCa) -> Any:
    """A gateway whose admin listener requires a client certificate from `clients`."""
    clients = private_ca(tmp_path / "client-ca")
    cert, key = server_ca.leaf_files("admin")
    counting = CountingUpstream()
    tls = {"cert": cert, "key": key, "client_ca": clients.ca_file}
    async with serving_app(counting.app()) as origin:
        gateway = start(
            tmp_path, redis_url, origin,
            admin={"host": "127.0.0.1", "token": ADMIN_TOKEN, "tls": tls},
        )  # fmt: skip
        admin_port = gateway.admin_port
        try:
            wait_for_port(admin_port, gateway.process)
            yield admin_port, clients
        finally:
            gateway.stop()
            assert "Traceback" not in gateway.log()


SHOW = orjson.dumps({"route": "api", "key": "k-1"})


def show_request(token: str | None) -> bytes:
    auth = b"Authorization: Bearer %s\r\n" % token.encode() if token else b""
    return (
        b"POST /keys/show HTTP/1.1\r\nHost: admin\r\nContent-Type: application/json\r\n%s"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (auth, len(SHOW), SHOW)
    )


def refused(port: int, context: ssl.SSLContext) -> None:
    """The admin listener ends the handshake: with TLS 1.2 the client's handshake fails;
    with TLS 1.3 (the client's part of the handshake is done before the server checks its
    certificate) the connection ends with no answer. (Python's loops close the connection
    without sending the TLS alert.)"""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        if context.maximum_version == ssl.TLSVersion.TLSv1_2:
            with pytest.raises(ssl.SSLError):
                context.wrap_socket(raw, server_hostname="127.0.0.1")
            return
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            try:
                tls.sendall(show_request(ADMIN_TOKEN))
                answer = tls.recv(65536)
            except (ssl.SSLError, ConnectionResetError):
                return
            assert answer == b"", f"the admin listener answered {answer[:80]!r}"


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
@pytest.mark.parametrize("client", ["none", "wrong-ca", "expired"])
async def test_the_admin_listener_refuses_clients_without_a_trusted_certificate(
    mtls_admin: tuple[int, PrivateCa],
    server_ca: PrivateCa,
    tmp_path: Path,
    client: str,
    version: str,
) -> None:
    port, clients = mtls_admin
    if client == "none":
        cert = None
    elif client == "wrong-ca":
        cert = private_ca(tmp_path / "other-ca").client_files("operator")
    else:
        yesterday = datetime.now(UTC) - timedelta(days=1)
        cert = clients.leaf_files("expired", "operator.test", not_after=yesterday)
    context = client_context(server_ca, cert)
    context.maximum_version = ssl.TLSVersion[version]
    await asyncio.to_thread(refused, port, context)
    # The same client with a trusted certificate is answered: the refusal was the cert's.
    context = client_context(server_ca, clients.client_files("operator"))
    context.maximum_version = ssl.TLSVersion[version]
    answer = await asyncio.to_thread(tls_request, port, context, show_request(ADMIN_TOKEN))
    assert answer.startswith(b"HTTP/1.1 404 ")


async def test_a_trusted_client_certificate_reaches_the_key_endpoints_with_its_token(
    mtls_admin: tuple[int, PrivateCa], server_ca: PrivateCa
) -> None:
    port, clients = mtls_admin
    context = client_context(server_ca, clients.client_files("operator"))
    without = await asyncio.to_thread(tls_request, port, context, show_request(None))
    assert without.startswith(b"HTTP/1.1 401 ")  # the certificate does not stand in for it
    found = await asyncio.to_thread(tls_request, port, context, show_request(ADMIN_TOKEN))
    assert found.startswith(b"HTTP/1.1 404 ")  # no record for this key: the endpoint ran
    assert found.endswith(b'{"state": "absent"}')


# `--check`: files that cannot serve are refused in one line.


def check(tmp_path: Path, tls: dict[str, Any], env: dict[str, str] | None = None) -> str:
    config = {"upstream": "http://127.0.0.1:9", "pass_through": True, "listen": {"tls": tls}}
    path = tmp_path / "check.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--check", str(path)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == (0 if not done.stderr else 2), done
    assert done.stderr.count("\n") <= 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip()


def encrypted_key(key: str, password: bytes) -> str:
    loaded = serialization.load_pem_private_key(Path(key).read_bytes(), None)
    path = Path(key).with_suffix(".enc.key")
    path.write_bytes(
        loaded.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(password),
        )
    )
    return str(path)


def test_check_accepts_a_good_pair_and_an_encrypted_key_with_its_password(
    tmp_path: Path, server_ca: PrivateCa
) -> None:
    cert, key = server_ca.leaf_files("good")
    assert check(tmp_path, {"cert": cert, "key": key}) == ""
    locked = encrypted_key(key, b"s3cret")
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    assert check(tmp_path, {"cert": cert, "key": locked, "key_password_file": str(secret)}) == ""
    env = {"IDEM_KEY_PASSWORD": "s3cret"}
    tls = {"cert": cert, "key": locked, "key_password_env": "IDEM_KEY_PASSWORD"}
    assert check(tmp_path, tls, env) == ""


REFUSED = {  # a listen.tls that cannot serve: the files it names, and what --check says
    "unreadable": ({"cert": "missing.crt", "key": "key"}, "No such file"),
    "mismatched": ({"cert": "cert", "key": "other_key"}, "key values mismatch"),
    "encrypted": ({"cert": "cert", "key": "locked"}, "the key is encrypted"),
    "wrong-password": (
        {"cert": "cert", "key": "locked", "key_password_file": "wrong"},
        "does not decrypt with the password",
    ),
    "expired": ({"cert": "old_cert", "key": "old_key"}, "expired on"),
    "client-ca": ({"cert": "cert", "key": "key", "client_ca": "garbage"}, "client_ca"),
    "no-client-ca": ({"cert": "cert", "key": "key", "client_auth": "optional"}, "needs client_ca"),
    "two-passwords": (
        {"cert": "cert", "key": "locked", "key_password_file": "wrong", "key_password_env": "X"},
        "not both",
    ),
    "ciphers": ({"cert": "cert", "key": "key", "ciphers": "NO-SUCH-CIPHER"}, "no cipher matches"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_check_refuses_certificate_files_that_cannot_serve(
    tmp_path: Path, server_ca: PrivateCa, case: str
) -> None:
    cert, key = server_ca.leaf_files("good")
    yesterday = datetime.now(UTC) - timedelta(days=1)
    old_cert, old_key = server_ca.leaf_files("old", not_after=yesterday)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    wrong = tmp_path / "wrong-password"
    wrong.write_text("guess\n")
    files = {
        "cert": cert,
        "key": key,
        "other_key": server_ca.leaf_files("other")[1],
        "old_cert": old_cert,
        "old_key": old_key,
        "locked": encrypted_key(key, b"s3cret"),
        "garbage": str(garbage),
        "wrong": str(wrong),
        "missing.crt": str(tmp_path / "missing.crt"),
    }
    named, expected = REFUSED[case]
    tls = {field: files.get(value, value) for field, value in named.items()}
    said = check(tmp_path, tls)
    assert said.startswith("idem-gateway: invalid config ") and "listen.tls" in said
    assert expected in said, said


def test_a_subject_with_an_email_address_reads_as_openssl_prints_it(tmp_path: Path) -> None:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc."),
            x509.NameAttribute(NameOID.COMMON_NAME, "tenant-a"),
            x509.NameAttribute(NameOID.EMAIL_ADDRESS, "ops@example.test"),
            x509.NameAttribute(NameOID.SERIAL_NUMBER, "42"),
        ]
    )
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "client.pem"
    path.write_bytes(cert.public_bytes(Encoding.PEM))
    printed = subprocess.run(
        ["openssl", "x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", str(path)],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert printed.startswith("subject=")
    assert subject_of(cert) == printed.removeprefix("subject=")
    assert "emailAddress=ops@example.test" in subject_of(cert)
