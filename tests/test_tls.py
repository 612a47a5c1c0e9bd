"""`rediss://` with `redis.tls`: the gateway verifies the server against the configured CA.

The redis-server binary here is built without TLS, so a TLS-terminating relay (the standard
library's ssl, certificates from trustme) stands in front of the real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trustme

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings

from .gateways import GatewayFactory
from .upstream import CountingUpstream


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_redis(redis_url: str, ca: trustme.CA) -> AsyncIterator[int]:
    """A TLS port that relays to the session's Redis; its certificate is for 127.0.0.1."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    target = urlsplit(redis_url).port
    relays: set[asyncio.Task[None]] = set()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        task = asyncio.current_task()
        assert task is not None
        relays.add(task)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            relays.discard(task)

    server = await asyncio.start_server(relay, "127.0.0.1", 0, ssl=context)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    for task in list(relays):
        task.cancel()
    await asyncio.gather(*relays, return_exceptions=True)


def tls_settings(origin: str, port: int, ca_file: Path) -> Settings:
    return settings_from_dict(
        {
            "redis": {"url": f"rediss://127.0.0.1:{port}/0", "tls": {"ca": str(ca_file)}},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
    )


async def test_rediss_with_the_right_ca_records_and_replays(
    tls_redis: int,
    ca: trustme.CA,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    tmp_path: Path,
) -> None:
    counting, origin = upstream
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    settings = tls_settings(origin, tls_redis, ca_file)
    client = await make_gateway(settings=settings, url=f"rediss://127.0.0.1:{tls_redis}/0")
    for _ in range(2):
        resp = await client.post("/pay", data=b"1", headers={"Idempotency-Key": "tls-1"})
        assert resp.status == 201
    assert resp.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/pay", "tls-1") == 1


async def test_rediss_with_another_ca_fails_closed(
    tls_redis: int,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    tmp_path: Path,
) -> None:
    counting, origin = upstream
    stranger = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    settings = tls_settings(origin, tls_redis, stranger)
    client = await make_gateway(settings=settings, url=f"rediss://127.0.0.1:{tls_redis}/0")
    resp = await client.post("/pay", data=b"1", headers={"Idempotency-Key": "tls-2"})
    assert resp.status == 503
    assert counting.count("/pay", "tls-2") == 0
