"""Rotating a TLS listener's certificate with SIGHUP, under load: no request fails, new
connections get the new certificate (in every worker), open ones keep the old and are not
dropped; files that do not load leave the certificate in use serving. The expiry metric
follows the certificate in use."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from gateway.config.server_tls import ServerTls
from gateway.http.server.certificates import Certificates
from testkit.polling import until
from testkit.ports import wait_for_port
from testkit.procs import GatewayProcess

from .scrape import sample
from .tls_certs import PrivateCa, der, presented, private_ca, rotate
from .upstream import CountingUpstream, serving_app


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: str) -> int:
    """One request on a kept-alive connection; the answer's status."""
    writer.write(
        b"POST /pay HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: %s\r\nContent-Length: 2\r\n\r\n{}"
        % key.encode()
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )  # fmt: skip
    await reader.readexactly(length)
    return int(head.split(b" ")[1])


def config_for(
    tmp_path: Path, redis_url: str, origin: str, tls: dict[str, str], **more: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "redis": {"url": redis_url},
        "blob": {"url": f"file://{tmp_path}/blobs"},
        "listen": {"tls": tls},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        **more,
    }
    return config


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_rotation_under_load_fails_no_request_and_reaches_every_worker(
    redis_url: str, tmp_path: Path, workers: int
) -> None:
    ca = private_ca(tmp_path / "ca")
    cert, key = ca.leaf_files("gateway")
    old = der(cert)
    context = ssl.create_default_context(cafile=ca.ca_file)
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        config = config_for(tmp_path, redis_url, origin, {"cert": cert, "key": key})
        gateway = GatewayProcess(config, tmp_path, ["--workers", str(workers)]).start()
        # Every worker serves, its SIGHUP handler in place (one coming sooner is ignored).
        await until(
            lambda: gateway.log().count("idem-gateway listening on https") == workers,
            20, "every worker serving",
        )  # fmt: skip
        statuses: list[int] = []
        failures: list[str] = []
        stop = asyncio.Event()

        async def client(n: int, session: aiohttp.ClientSession) -> None:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    async with session.post(
                        f"https://127.0.0.1:{gateway.port}/pay",
                        data=b"{}",
                        headers={"Idempotency-Key": f"rot-{n}-{i}"},
                    ) as answer:
                        await answer.read()
                        statuses.append(answer.status)
                except (aiohttp.ClientError, OSError) as exc:
                    failures.append(repr(exc))

        try:
            async with contextlib.AsyncExitStack() as sessions:

                async def session(connections: int) -> aiohttp.ClientSession:
                    connector = aiohttp.TCPConnector(ssl=context, limit=connections)
                    return await sessions.enter_async_context(
                        aiohttp.ClientSession(connector=connector)
                    )

                crowd = [await session(2) for _ in range(4)]
                # One connection opened before the rotation and kept open across it.
                kept_reader, kept = await asyncio.open_connection(
                    "127.0.0.1", gateway.port, ssl=context
                )
                sessions.callback(kept.close)
                assert await ask(kept_reader, kept, "kept-1") == 201
                kept_tls = kept.get_extra_info("ssl_object")
                assert kept_tls.getpeercert(binary_form=True) == old
                load = [asyncio.ensure_future(client(n, s)) for n, s in enumerate(crowd)]
                await until(lambda: len(statuses) >= 50, 20, "requests before the rotation")
                new = rotate(ca, cert, key)
                gateway.signal(signal.SIGHUP)
                fresh: list[bytes] = []

                async def every_new_connection_is_new() -> bool:
                    """Twelve new connections all see the new certificate: every worker's."""
                    fresh[:] = [await presented(gateway.port, context) for _ in range(12)]
                    return all(der == new for der in fresh)

                await until(every_new_connection_is_new, 20, every=0.05)
                during = len(statuses)
                await until(lambda: len(statuses) >= during + 50, 20, "requests after it")
                stop.set()
                await asyncio.gather(*load)
                # The connection opened before is still open, served, with the old certificate.
                assert await ask(kept_reader, kept, "kept-2") == 201
                assert kept_tls.getpeercert(binary_form=True) == old
        finally:
            gateway.stop()
    assert failures == []
    assert set(statuses) == {201} and len(statuses) >= 100
    log = gateway.log()
    said = [line for line in log.splitlines() if '"request"' not in line]
    assert log.count("listen.tls: certificate reloaded") == workers, "\n".join(said)
    assert "Traceback" not in log


async def test_files_that_do_not_load_keep_the_certificate_in_use_and_the_metric_follows(
    redis_url: str, tmp_path: Path
) -> None:
    ca = private_ca(tmp_path / "ca")
    now = datetime.now(UTC).replace(microsecond=0)
    cert, key = ca.leaf_files("gateway", not_after=now + timedelta(days=30))
    context = ssl.create_default_context(cafile=ca.ca_file)
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        config = config_for(
            tmp_path, redis_url, origin, {"cert": cert, "key": key},
            admin={"host": "127.0.0.1"},
        )  # fmt: skip
        gateway = GatewayProcess(config, tmp_path).start()
        admin = gateway.admin_port
        try:
            assert gateway.process is not None
            wait_for_port(admin, gateway.process)

            async def expiry() -> float:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"http://127.0.0.1:{admin}/metrics") as answer,
                ):
                    text = await answer.text()
                name = "idem_listener_certificate_expiry_timestamp_seconds"
                return sample(text, name, listener="listen")

            def not_after(path: str) -> float:
                loaded = x509.load_pem_x509_certificate(Path(path).read_bytes())
                return loaded.not_valid_after_utc.timestamp()

            assert await expiry() == not_after(cert)
            in_use = await presented(gateway.port, context)
            # A key that does not match: refused, the old pair serves on.
            _, other_key = ca.leaf_files("other")
            kept_key = Path(key).read_bytes()
            os.replace(other_key, key)
            gateway.signal(signal.SIGHUP)
            await until(lambda: "reload refused" in gateway.log(), 10, "the refusal")
            assert await presented(gateway.port, context) == in_use
            refusals = [line for line in gateway.log().splitlines() if "reload refused" in line]
            assert len(refusals) == 1 and "key values mismatch" in refusals[0]
            # The key put back beside a new certificate: the metric shows the new expiry.
            Path(key).write_bytes(kept_key)
            new = rotate(ca, cert, key, not_after=now + timedelta(days=90))
            gateway.signal(signal.SIGHUP)
            await until(lambda: "certificate reloaded" in gateway.log(), 10, "the reload")
            assert await presented(gateway.port, context) == new
            assert await expiry() == not_after(cert) == (now + timedelta(days=90)).timestamp()
        finally:
            gateway.stop()
    assert "Traceback" not in gateway.log()


async def test_the_admin_listener_certificate_is_rotated_with_the_public_one(
    redis_url: str, tmp_path: Path
) -> None:
    ca = private_ca(tmp_path / "ca")
    cert, key = ca.leaf_files("gateway")
    admin_cert, admin_key = ca.leaf_files("admin")
    context = ssl.create_default_context(cafile=ca.ca_file)
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        tls = {"cert": admin_cert, "key": admin_key}
        config = config_for(
            tmp_path, redis_url, origin, {"cert": cert, "key": key},
            admin={"host": "127.0.0.1", "tls": tls},
        )  # fmt: skip
        gateway = GatewayProcess(config, tmp_path).start()
        admin = gateway.admin_port
        try:
            assert gateway.process is not None
            wait_for_port(admin, gateway.process)
            assert await presented(admin, context) == der(admin_cert)
            new_public = rotate(ca, cert, key)
            new_cert, new_key = ca.leaf_files("admin-next")
            os.replace(new_key, admin_key)
            os.replace(new_cert, admin_cert)
            gateway.signal(signal.SIGHUP)
            await until(lambda: gateway.log().count("certificate reloaded") == 2, 10, "reloads")
            assert await presented(admin, context) == der(admin_cert)
            assert await presented(gateway.port, context) == new_public
        finally:
            gateway.stop()
    log = gateway.log()
    assert "listen.tls: certificate reloaded" in log and "admin.tls: certificate reloaded" in log


async def test_a_reload_swaps_the_client_ca_for_new_connections(tmp_path: Path) -> None:
    """The whole context is replaced, trust store included: after a reload whose client_ca
    holds another CA, that CA's clients are served and the old one's are refused."""
    server = private_ca(tmp_path / "server")
    first, second = private_ca(tmp_path / "first"), private_ca(tmp_path / "second")
    cert, key = server.leaf_files("gateway")
    client_ca = tmp_path / "clients.pem"
    client_ca.write_bytes(Path(first.ca_file).read_bytes())
    certificates = Certificates("listen", ServerTls(cert=cert, key=key, client_ca=str(client_ca)))

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await reader.readexactly(2)
            writer.write(b"ok")
            await writer.drain()
        writer.close()

    listening = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=certificates.context)
    port = listening.sockets[0].getsockname()[1]

    clients = {id(ca): ca.client_files("client") for ca in (first, second)}

    async def served(ca: PrivateCa) -> bool:
        context = ssl.create_default_context(cafile=server.ca_file)
        context.load_cert_chain(*clients[id(ca)])
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        try:
            writer.write(b"hi")
            return await reader.read() == b"ok"
        except (ConnectionError, ssl.SSLError):
            return False
        finally:
            writer.close()

    try:
        assert (await served(first), await served(second)) == (True, False)
        client_ca.write_bytes(Path(second.ca_file).read_bytes())
        assert certificates.reload()
        assert (await served(first), await served(second)) == (False, True)
    finally:
        listening.close()
        await listening.wait_closed()


async def test_with_watch_interval_a_rotation_needs_no_signal(
    redis_url: str, tmp_path: Path
) -> None:
    """The files are looked at every watch_interval: a rotation is loaded without SIGHUP,
    and files that do not load are refused once and loaded at their next change. The key is
    in the certificate's file here, so that each change replaces the pair at once."""
    ca = private_ca(tmp_path / "ca")
    combined = tmp_path / "gateway.pem"

    def write(cert: str, key: str) -> bytes:
        """`cert` with `key` in one file, renamed over the served one; the cert's DER."""
        staged = tmp_path / "staged.pem"
        staged.write_bytes(Path(cert).read_bytes() + Path(key).read_bytes())
        os.replace(staged, combined)
        return der(cert)

    cert, key = ca.leaf_files("gateway")
    old = write(cert, key)
    context = ssl.create_default_context(cafile=ca.ca_file)
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        tls = {"cert": str(combined), "watch_interval": "100ms"}
        gateway = GatewayProcess(config_for(tmp_path, redis_url, origin, tls), tmp_path).start()
        try:
            assert await presented(gateway.port, context) == old
            _, other_key = ca.leaf_files("other")
            write(cert, other_key)  # a key that does not match: refused
            await until(lambda: "reload refused" in gateway.log(), 10, "the refusal")
            assert await presented(gateway.port, context) == old
            new_cert, new_key = ca.leaf_files("next")
            new = write(new_cert, new_key)
            await until(lambda: "certificate reloaded" in gateway.log(), 10, "the rotation")
            assert await presented(gateway.port, context) == new
        finally:
            gateway.stop()
    log = gateway.log()
    # Said once: the refused files were not tried again at every look.
    assert log.count("reload refused") == 1 and log.count("certificate reloaded") == 1
    assert "Traceback" not in log
