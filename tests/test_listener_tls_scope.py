"""A mutual-TLS client's certificate as the tenant scope (`client-cert:subject`,
`client-cert:san-dns`): two clients with the same key are two tenants, each replayed its own
answer; the certificate's values are hashed into the Redis key, never stored raw."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis

from gateway.config.loading import settings_from_dict
from gateway.errors import ConfigError
from testkit.procs import GatewayProcess

from .tls_certs import PrivateCa, private_ca
from .upstream import CountingUpstream, serving_app


def client(server: PrivateCa, cert: tuple[str, str] | None) -> aiohttp.ClientSession:
    context = ssl.create_default_context(cafile=server.ca_file)
    if cert is not None:
        context.load_cert_chain(*cert)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))


async def pay(session: aiohttp.ClientSession, port: int, key: str) -> tuple[int, bytes, bool]:
    async with session.post(
        f"https://127.0.0.1:{port}/pay", data=b"{}", headers={"Idempotency-Key": key}
    ) as answer:
        body = await answer.read()
        return answer.status, body, answer.headers.get("Idempotent-Replayed") == "true"


@pytest.mark.parametrize("scope", ["client-cert:subject", "client-cert:san-dns"])
async def test_clients_with_their_own_certificates_are_their_own_tenants(
    redis_url: str, tmp_path: Path, scope: str
) -> None:
    server = private_ca(tmp_path / "server-ca")
    tenants = private_ca(tmp_path / "tenant-ca")
    cert, key = server.leaf_files("gateway")
    first = tenants.leaf_files("tenant-a", "tenant-a.example")
    second = tenants.leaf_files("tenant-b", "tenant-b.example")
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        config: dict[str, Any] = {
            "redis": {"url": redis_url},
            "blob": {"url": f"file://{tmp_path}/blobs"},
            "listen": {
                "tls": {
                    "cert": cert, "key": key, "client_ca": tenants.ca_file,
                    "client_auth": "optional",
                },
            },
            "routes": [{
                "name": "api", "path_prefix": "/", "upstream": origin,
                "scope": [scope], "require_scope": True,
            }],
        }  # fmt: skip
        gateway = GatewayProcess(config, tmp_path).start()
        try:
            async with client(server, first) as a, client(server, second) as b:
                a_status, a_body, a_replayed = await pay(a, gateway.port, "same-key")
                b_status, b_body, b_replayed = await pay(b, gateway.port, "same-key")
                assert (a_status, b_status) == (201, 201)
                assert not a_replayed and not b_replayed
                assert a_body != b_body  # each ran upstream: two payments
                assert await pay(a, gateway.port, "same-key") == (201, a_body, True)
                assert await pay(b, gateway.port, "same-key") == (201, b_body, True)
            async with client(server, None) as anonymous:
                status, body, _ = await pay(anonymous, gateway.port, "same-key")
                assert status == 400 and orjson.loads(body)["code"] == "missing-scope"
        finally:
            gateway.stop()
    assert counting.count("/pay") == 2
    stored = redis.Redis.from_url(redis_url)
    try:
        keys = b" ".join(stored.keys("*"))
    finally:
        stored.close()
    assert keys and b"tenant-a" not in keys and b"tenant-b" not in keys


def test_a_certificate_scope_needs_mutual_tls_on_the_listener(tmp_path: Path) -> None:
    server = private_ca(tmp_path / "server-ca")
    cert, key = server.leaf_files("gateway")
    route = {"name": "api", "path_prefix": "/", "upstream": "http://127.0.0.1:9"}
    for listen in ({}, {"tls": {"cert": cert, "key": key}}):
        with pytest.raises(ConfigError, match=r"routes\[0\].scope names the client's cert"):
            settings_from_dict(
                {"listen": listen, "routes": [{**route, "scope": ["client-cert:subject"]}]}
            )
    with pytest.raises(ConfigError, match="not a header name or one of client-cert:san-dns"):
        settings_from_dict({"routes": [{**route, "scope": ["client-cert:issuer"]}]})
