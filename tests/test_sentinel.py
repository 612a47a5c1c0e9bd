"""Sentinel: the master dies under traffic, the gateway follows the failover by itself, and with
`claim_replicas: 1` no key runs twice.

Sentinel's down-after is 1 s: at 500 ms it declared each freshly promoted master down again on
this loaded two-core machine and flapped between the two nodes, losing data.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio.connection import SSLConnection
from redis.exceptions import RedisError

from gateway.config.loading import settings_from_dict
from gateway.http.app import METRICS, SERVICES, TASKS
from gateway.store.client import FollowsMaster, make_client
from gateway.store.redispy_pipeline import RedisPyPipeline
from gateway.store.sentinel import PROMOTING, SentinelMaster, moved_to
from testkit.polling import until, wait_until
from testkit.topologies import SERVICE, SentinelServers, client

from .gateways import GatewayFactory
from .tls_certs import private_ca
from .upstream import CountingUpstream

CLIENTS = 4
# A client's pause before it retries a 503 or 409 (its retry policy, not a synchronisation).
RETRY_PAUSE = 0.05


@pytest.fixture
def sentinel() -> Iterator[SentinelServers]:
    servers = SentinelServers()
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


def raise_any(results: list[object]) -> None:
    """What a client task raised, if any did."""
    for result in results:
        if isinstance(result, BaseException):
            raise result


class Traffic:
    """Clients that each send new keys one after another, retrying every key to a 201."""

    def __init__(self, client: TestClient, deadline: float = 20.0) -> None:
        self.client = client
        self.deadline = deadline
        self.done: list[str] = []
        self.statuses: Counter[int] = Counter()
        self.stop = asyncio.Event()

    async def run(self, name: str) -> None:
        for n in range(10**6):
            if self.stop.is_set():
                return
            key = f"{name}-{n}"
            give_up = asyncio.get_running_loop().time() + self.deadline
            while True:
                resp = await self.client.post(
                    "/pay", data=key.encode(), headers={"Idempotency-Key": key}
                )
                await resp.read()
                self.statuses[resp.status] += 1
                if resp.status == 201:
                    self.done.append(key)
                    break
                assert resp.status in (409, 503), resp.status
                assert asyncio.get_running_loop().time() < give_up, f"{key} never answered"
                await asyncio.sleep(RETRY_PAUSE)

    async def until_done(self, count: int, timeout: float) -> None:
        await until(lambda: len(self.done) >= count, timeout, f"{count} keys answered 201")


async def test_failover_under_traffic_runs_no_key_twice(
    sentinel: SentinelServers,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    counting, origin = upstream
    settings = settings_from_dict(
        {
            "redis": {
                "sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE},
                "claim_replicas": 1,
                "claim_replicas_timeout": "300ms",
                "connect_timeout": "300ms",
                "breaker": {"failures": 3, "reset": "200ms"},
            },
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, "lease": "5s"}],
        }
    )
    client = await make_gateway(settings=settings)
    # The master moves: its pipelines stay on redis-py's pool, which follows it.
    assert isinstance(
        getattr(client.server.app[SERVICES].store.sender, "batches", None), RedisPyPipeline
    )
    traffic = Traffic(client)
    clients = [asyncio.create_task(traffic.run(f"c{i}")) for i in range(CLIENTS)]
    try:
        await traffic.until_done(20, timeout=10)
        old_port = sentinel.master.port
        await asyncio.to_thread(sentinel.master.stop, True)  # SIGKILL, mid-traffic
        before = len(traffic.done)
        await asyncio.to_thread(
            wait_until, lambda: sentinel.master_port() != old_port, 15, "sentinel failover"
        )
        new_port = sentinel.master_port()
        assert new_port == sentinel.replica.port
        # The old master returns as a replica of the new one: WAIT 1 can succeed again.
        sentinel.master.extra = ["--replicaof", "127.0.0.1", str(new_port)]
        await asyncio.to_thread(sentinel.master.start)
        await traffic.until_done(before + 20, timeout=20)
    finally:
        traffic.stop.set()
        results = await asyncio.gather(*clients, return_exceptions=True)
    raise_any(results)

    # A client has its answer once the body is sent; the record may still be on its way
    # (retried across the failover): wait for the gateway's forwarding tasks to finish.
    await client.server.app[TASKS].drain(10)
    assert len(client.server.app[TASKS]) == 0
    # The gateway met the dead master: as 503s for new claims, or as completions retried
    # until the new master took them (the clients then waited instead of seeing 503).
    errors = client.server.app[METRICS].registry.get_sample_value("idem_redis_errors_total")
    assert errors, "the failover went unnoticed"
    ran = Counter(counting.calls[("/pay", key)] for key in traffic.done)
    assert ran == {1: len(traffic.done)}, f"upstream runs per key: {ran}"
    # Every answer survived the failover: a retry of any key is a replay.
    for key in traffic.done:
        resp = await client.post("/pay", data=key.encode(), headers={"Idempotency-Key": key})
        await resp.read()
        assert (resp.status, resp.headers.get("Idempotent-Replayed")) == (201, "true"), key
    assert Counter(counting.calls[("/pay", key)] for key in traffic.done) == ran


async def test_a_master_demoted_by_a_failover_is_left_for_the_new_one(
    sentinel: SentinelServers,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    """`SENTINEL FAILOVER` leaves the old master up, as a replica, and closes its clients:
    the gateway's pooled connections must open again to the new master, not to the old one,
    where every claim is refused (READONLY)."""
    counting, origin = upstream
    settings = settings_from_dict(
        {
            "redis": {
                "sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE},
                "breaker": {"failures": 3, "reset": "200ms"},
            },
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
    )
    client = await make_gateway(settings=settings)
    traffic = Traffic(client, deadline=5.0)
    first = [asyncio.create_task(traffic.run(f"before{i}")) for i in range(CLIENTS)]
    await traffic.until_done(20, timeout=10)  # every pooled connection has been used
    traffic.stop.set()
    await asyncio.gather(*first)
    await asyncio.to_thread(sentinel.fail_over)

    traffic = Traffic(client, deadline=5.0)  # each key answered 201 within 5 s of retries
    after = [asyncio.create_task(traffic.run(f"after{i}")) for i in range(CLIENTS)]
    try:
        await traffic.until_done(20, timeout=10)
    finally:
        traffic.stop.set()
        results = await asyncio.gather(*after, return_exceptions=True)
    raise_any(results)
    ran = Counter(counting.calls[("/pay", key)] for key in traffic.done)
    assert ran == {1: len(traffic.done)}, f"upstream runs per key: {ran}"


def test_the_master_is_followed_over_tls_too(tmp_path: Path) -> None:
    """Over TLS the connections follow the master the same way, and speak TLS."""
    ca = private_ca(tmp_path).ca_file
    plain, tls = (
        make_client(
            settings_from_dict(
                {"redis": {"sentinel": {"nodes": ["127.0.0.1:1"], "service": SERVICE}, **extra}}
            ).redis,
            "",
        )
        for extra in ({}, {"tls": {"enabled": True, "ca": ca}})
    )
    assert plain.connection_pool.connection_class is FollowsMaster
    assert issubclass(tls.connection_pool.connection_class, FollowsMaster)
    assert issubclass(tls.connection_pool.connection_class, SSLConnection)


def test_sentinel_announcements_name_the_new_master() -> None:
    assert moved_to("+switch-master", f"{SERVICE} 127.0.0.1 7000 127.0.0.1 7001", SERVICE) == (
        "127.0.0.1",
        7001,
    )
    promoted = f"slave 127.0.0.1:7001 127.0.0.1 7001 @ {SERVICE} 127.0.0.1 7000"
    assert moved_to("+promoted-slave", promoted, SERVICE) == ("127.0.0.1", 7001)
    assert moved_to(PROMOTING, promoted, SERVICE) == ("127.0.0.1", 7001)
    assert moved_to("+switch-master", "other 127.0.0.1 7000 127.0.0.1 7001", SERVICE) is None
    assert moved_to("+sdown", promoted, SERVICE) is None


async def test_a_write_after_a_promotion_never_lands_on_the_old_master(
    sentinel: SentinelServers,
) -> None:
    """`SENTINEL FAILOVER` promotes the replica and leaves the old master a master with its
    clients connected until Sentinel turns it into a replica (seconds later): a write sent
    there meanwhile is acknowledged and then lost. Once Sentinel announces the switch, the
    gateway's pooled connections are dropped, and the next writes go to the new master."""
    settings = settings_from_dict(
        {"redis": {"sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE}}}
    )
    redis = make_client(settings.redis, "")
    assert isinstance(redis, SentinelMaster)
    redis.follow()
    try:
        pool = redis.connection_pool
        held = [await pool.get_connection() for _ in range(4)]  # several pooled connections
        for connection in held:
            await connection.send_command("PING")
            await connection.read_response()
        for connection in held:
            await pool.release(connection)
        old, new = sentinel.master, sentinel.replica

        def accepted() -> bool:  # refused (NOGOODSLAVE) until Sentinel has a replica to promote
            with client(sentinel.sentinel) as watcher:
                try:
                    watcher.execute_command("SENTINEL", "FAILOVER", SERVICE)
                except RedisError:
                    return False
            return True

        await asyncio.to_thread(wait_until, accepted, 15, "SENTINEL FAILOVER accepted")
        assert all(c.port == old.port and c.is_connected for c in held)

        def switched() -> bool:
            return sentinel.master_port() == new.port

        await asyncio.to_thread(wait_until, switched, 15, "sentinel names the new master")
        # The old master is still a master with its clients until Sentinel demotes it; the
        # gateway heard the announcement too, and follows it with no connection opened.
        give_up = asyncio.get_running_loop().time() + 2
        await until(
            lambda: pool.master_address == ("127.0.0.1", new.port), 2, "the announcement heard"
        )
        for n in range(20):
            while True:  # refused while the failover ends: retried, as a client retries a 503
                try:
                    await redis.set(f"w{n}", "1")
                    break
                except RedisError:
                    assert asyncio.get_running_loop().time() < give_up + 5, "writes refused"
                    await asyncio.sleep(0.02)
        with client(new) as each:
            assert each.exists(*(f"w{n}" for n in range(20))) == 20
        with client(old) as each:
            assert each.exists(*(f"w{n}" for n in range(20))) == 0 or (
                each.info("replication")["role"] == "slave"  # replicated from the new one
            )
    finally:
        await redis.aclose()


async def test_a_master_that_writes_without_replicas_is_warned_of_at_start(
    sentinel: SentinelServers,
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = settings_from_dict(
        {
            "redis": {"sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE}},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": upstream[1]}],
        }
    )
    warning = "the Sentinel master has min-replicas-to-write 0"
    await make_gateway(settings=settings)
    assert warning in caplog.text
    caplog.clear()
    with client(sentinel.master) as master:
        master.config_set("min-replicas-to-write", 1)
    await make_gateway(settings=settings)
    assert warning not in caplog.text


async def test_a_master_that_stops_answering_keeps_no_connection_to_take_writes_when_it_wakes(
    sentinel: SentinelServers,
) -> None:
    """A master paused past `socket_timeout` may be failed over while it sleeps; woken, it
    would take writes over every connection still open to it until Sentinel demotes it.
    One timeout drops every pooled connection: each opens again through the Sentinels."""
    settings = settings_from_dict(
        {
            "redis": {
                "sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE},
                "socket_timeout": "300ms",
            }
        }
    )
    redis = make_client(settings.redis, "")
    pool = redis.connection_pool
    try:
        held = [await pool.get_connection() for _ in range(4)]
        for connection in held:
            await pool.release(connection)
        assert all(connection.is_connected for connection in held)
        assert sentinel.master.process is not None
        sentinel.master.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(RedisError):
                await redis.set("during", "1")
        finally:
            sentinel.master.process.send_signal(signal.SIGCONT)
        assert not any(connection.is_connected for connection in held)
        await redis.set("after", "1")  # opened again, to the master Sentinel names
    finally:
        await redis.aclose()
