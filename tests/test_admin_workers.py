"""`--workers N` with an admin listener: one admin address for the whole gateway, which
answers for every worker (health, readiness, merged metrics, key operations)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from cryptography import x509

from testkit.polling import until
from testkit.ports import Port
from testkit.procs import STARTS_WITHIN, GatewayProcess

from .gateways import ADMIN_TOKEN
from .scrape import sample
from .tls_certs import der, presented, private_ca, rotate
from .upstream import CountingUpstream

WORKER = re.compile(r"worker pid (\d+) started")
LISTEN = "0A"  # a TCP socket's state in /proc/net/tcp: listening


def listening_ports(pids: list[int]) -> set[int]:
    """The TCP ports the processes `pids` listen on (from their descriptors and the
    kernel's socket table)."""
    inodes: set[str] = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd) if fd.is_symlink() else ""
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pids[0]}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture
async def two_workers(
    upstream: tuple[CountingUpstream, str], redis_url: str, tmp_path: Path
) -> AsyncIterator[tuple[GatewayProcess, str]]:
    _, origin = upstream
    config = {
        "redis": {"url": redis_url},
        "admin": {"token": ADMIN_TOKEN},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path, args=["--workers", "2"])
    await asyncio.to_thread(gateway.start)
    admin = f"http://127.0.0.1:{gateway.admin_port}"
    try:
        async with aiohttp.ClientSession() as http:

            async def both_ready() -> bool:
                async with http.get(f"{admin}/readyz") as resp:  # it listens as the gateway does
                    return resp.status == 200

            await until(both_ready, STARTS_WITHIN, "the gateway ready", every=0.05)
        yield gateway, admin
    finally:
        assert await asyncio.to_thread(gateway.stop) == 0


async def spread(http: aiohttp.ClientSession, url: str, prefix: str, count: int) -> None:
    """`count` requests at once on connections of their own, so both workers take some."""

    async def one(i: int) -> None:
        headers = {"Idempotency-Key": f"{prefix}-{i}", "Connection": "close"}
        async with http.post(f"{url}/pay", headers=headers) as resp:
            assert resp.status == 201

    await asyncio.gather(*(one(i) for i in range(count)))


async def metrics(http: aiohttp.ClientSession, admin: str) -> str:
    async with http.get(f"{admin}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


async def test_a_multi_worker_gateway_listens_on_its_two_addresses_only(
    two_workers: tuple[GatewayProcess, str],
) -> None:
    gateway, admin = two_workers
    assert gateway.process is not None
    pids = [gateway.process.pid, *gateway.worker_pids()]
    assert len(pids) == 3
    admin_port = int(admin.rsplit(":", 1)[1])
    assert listening_ports(pids) == {gateway.port, admin_port}


async def test_one_metrics_counts_every_workers_requests_with_a_worker_label(
    two_workers: tuple[GatewayProcess, str],
) -> None:
    gateway, admin = two_workers
    sent = 0
    async with aiohttp.ClientSession() as http:

        async def both_served() -> bool:
            nonlocal sent
            await spread(http, gateway.url, f"m{sent}", 20)
            sent += 20
            text = await metrics(http, admin)
            return all(
                sample(text, "idem_requests_total", outcome="forwarded", worker=w) > 0
                for w in ("0", "1")
            )

        await until(both_served, 20.0, "connections served by both workers", every=0.05)
        text = await metrics(http, admin)
    assert sample(text, "idem_requests_total", outcome="forwarded") == sent
    assert sample(text, "idem_workers") == 2 and sample(text, "idem_workers_up") == 2


async def test_counts_carry_on_across_a_worker_restart(
    two_workers: tuple[GatewayProcess, str],
) -> None:
    gateway, admin = two_workers
    async with aiohttp.ClientSession() as http:
        await spread(http, gateway.url, "before", 20)
        counted = sample(await metrics(http, admin), "idem_requests_total", outcome="forwarded")
        assert counted == 20
        victim = gateway.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)

        async def replaced() -> bool:
            async with http.get(f"{admin}/readyz") as resp:
                body = orjson.loads(await resp.read())
            pids = {w["pid"] for w in body["workers"]}
            return resp.status == 200 and victim not in pids and None not in pids

        await until(replaced, 20.0, "the killed worker replaced", every=0.05)
        text = await metrics(http, admin)
        assert sample(text, "idem_requests_total", outcome="forwarded") == 20
        assert sample(text, "idem_worker_restarts_total") == 1
        await spread(http, gateway.url, "after", 10)
        text = await metrics(http, admin)
    assert sample(text, "idem_requests_total", outcome="forwarded") == 30


async def test_health_and_readiness_answer_for_every_worker(
    two_workers: tuple[GatewayProcess, str],
) -> None:
    gateway, admin = two_workers
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{admin}/readyz") as resp:
            body = orjson.loads(await resp.read())
        assert resp.status == 200
        assert [w["worker"] for w in body["workers"]] == [0, 1]
        assert all(w["ready"] and w["redis"] for w in body["workers"])
        stopped = gateway.worker_pids()[1]
        os.kill(stopped, signal.SIGSTOP)  # alive, answering nothing
        try:
            async with http.get(f"{admin}/healthz") as resp:
                health = orjson.loads(await resp.read())
            assert resp.status == 503
            down = [w for w in health["workers"] if not w["up"]]
            assert [w["pid"] for w in down] == [stopped]
            async with http.get(f"{admin}/readyz") as resp:
                assert resp.status == 503
        finally:
            os.kill(stopped, signal.SIGCONT)
        async with http.get(f"{admin}/healthz") as resp:
            assert resp.status == 200


async def test_key_operations_through_the_one_address_name_the_operator(
    two_workers: tuple[GatewayProcess, str],
) -> None:
    gateway, admin = two_workers
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    async with aiohttp.ClientSession() as http:
        await spread(http, gateway.url, "op", 1)
        key = {"route": "api", "key": "op-0"}
        async with http.post(f"{admin}/keys/show", json=key, headers=auth) as resp:
            assert resp.status == 200
            assert (await resp.json())["state"] == "completed"
        async with http.post(f"{admin}/keys/purge", json=key) as resp:
            assert resp.status == 401  # the worker's answer, passed on
            assert resp.headers["Content-Type"] == "application/problem+json"
        confirmed = {**key, "confirm": True}
        async with http.post(f"{admin}/keys/purge", json=confirmed, headers=auth) as resp:
            assert resp.status == 200
        async with http.post(f"{admin}/keys/show", json=key, headers=auth) as resp:
            assert resp.status == 404

    def audited() -> list[dict[str, Any]]:
        lines = [line for line in gateway.log().splitlines() if '"gateway.audit"' in line]
        return [orjson.loads(line) for line in lines]

    await until(lambda: len(audited()) == 2, 20.0, "two audit lines", every=0.05)
    refused, line = audited()  # the purge without the token, then the purge
    assert (refused["action"], refused["why"], refused["remote"]) == (
        "refused",
        "no token",
        "127.0.0.1",
    )
    assert line["action"] == "purge" and line["route"] == "api"
    assert line["remote"] == "127.0.0.1"
    assert "op-0" not in line["record"]  # digests only


@pytest.mark.parametrize("clash", ["busy", "public"])
async def test_a_multi_worker_gateway_refuses_an_unusable_admin_port_in_one_line(
    clash: str, upstream: tuple[CountingUpstream, str], redis_url: str, tmp_path: Path
) -> None:
    _, origin = upstream
    with Port() as public, socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        # "public": the public address under another name, which only the bind can see.
        admin = (
            {"host": "localhost", "port": public.number}
            if clash == "public"
            else {"port": taken.getsockname()[1]}
        )
        config = {
            "listen": {"port": public.number},  # bound by the gateway, beside the hold
            "redis": {"url": redis_url},
            "admin": admin,
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
        gateway = GatewayProcess(config, tmp_path, args=["--workers", "2"])
        assert await asyncio.to_thread(gateway.exits) == 2
    (line,) = gateway.log().splitlines()
    assert line.startswith("idem-gateway: cannot start: admin.port:"), line


async def test_the_one_admin_address_shows_admin_tls_and_rotates_it_with_sighup(
    upstream: tuple[CountingUpstream, str], redis_url: str, tmp_path: Path
) -> None:
    _, origin = upstream
    ca = private_ca(tmp_path / "ca")
    cert, key = ca.leaf_files("admin")
    context = ssl.create_default_context(cafile=ca.ca_file)
    config = {
        "redis": {"url": redis_url},
        "admin": {"tls": {"cert": cert, "key": key}},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path, args=["--workers", "2"])
    admin_port = gateway.admin_port
    await asyncio.to_thread(gateway.start)
    try:
        assert await presented(admin_port, context) == der(cert)
        new = rotate(ca, cert, key)
        gateway.signal(signal.SIGHUP)
        await until(
            lambda: "admin.tls: certificate reloaded" in gateway.log(),
            20.0,
            "the reload",
            every=0.05,
        )
        assert await presented(admin_port, context) == new
        async with aiohttp.ClientSession() as http:
            url = f"https://127.0.0.1:{admin_port}/metrics"
            async with http.get(url, ssl=context) as resp:
                text = await resp.text()
        name = "idem_listener_certificate_expiry_timestamp_seconds"
        loaded = x509.load_pem_x509_certificate(Path(cert).read_bytes())
        assert sample(text, name, listener="admin") == loaded.not_valid_after_utc.timestamp()
    finally:
        assert await asyncio.to_thread(gateway.stop) == 0
    assert "Traceback" not in gateway.log()
