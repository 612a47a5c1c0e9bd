"""`claim_replicas`: a claim that no replica acknowledged is given back and answered 503; and
the topology settings are validated."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.config.loading import load_settings, settings_from_dict
from gateway.config.settings import RedisSettings
from gateway.core.fingerprint import fingerprint
from gateway.core.keys import route_of_name
from gateway.errors import ConfigError, StoreUnavailable
from gateway.ops.keyops import locate
from gateway.store.client import tls_options
from testkit.polling import until, wait_until
from testkit.redis_server import RedisServer
from testkit.stores import make_store
from testkit.topologies import SentinelServers, start_all

from .gateways import GatewayFactory
from .tls_certs import private_ca
from .upstream import CountingUpstream


@pytest.fixture
def master_and_replica() -> Iterator[tuple[RedisServer, RedisServer]]:
    master = RedisServer()
    replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(master.port)])
    try:
        start_all([master, replica])
        wait_until(lambda: SentinelServers.replicas_online(master) == 1, 10, "replica in sync")
        yield master, replica
    finally:
        replica.close()
        master.close()


async def test_unacknowledged_claim_is_released_and_answered_503(
    master_and_replica: tuple[RedisServer, RedisServer],
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    master, replica = master_and_replica
    counting, origin = upstream
    settings = settings_from_dict(
        {
            "redis": {"url": master.url, "claim_replicas": 1, "claim_replicas_timeout": "200ms"},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
    )
    client = await make_gateway(settings=settings, url=master.url)
    first = await client.post("/pay", data=b"1", headers={"Idempotency-Key": "with-replica"})
    assert first.status == 201
    assert counting.count("/pay", "with-replica") == 1

    replica.stop()
    wait_until(lambda: SentinelServers.replicas_online(master) == 0, 10, "replica gone")
    lonely = await client.post("/pay", data=b"2", headers={"Idempotency-Key": "no-replica"})
    assert lonely.status == 503
    assert lonely.headers["Content-Type"] == "application/problem+json"
    assert lonely.headers["Retry-After"]
    assert counting.count("/pay", "no-replica") == 0
    with redis.Redis.from_url(master.url) as direct:
        # Only the first key's record: the unacknowledged claim was given back.
        names = [name.decode() for name in direct.scan_iter()]
        assert len([name for name in names if route_of_name("idem", name)]) == 1, names
        # A replay needs no replica: it writes nothing.
        replay = await client.post("/pay", data=b"1", headers={"Idempotency-Key": "with-replica"})
        assert replay.status == 201
        assert replay.headers["Idempotent-Replayed"] == "true"


@pytest.mark.parametrize(
    ("redis_section", "message"),
    [
        (
            {"url": "redis://h:6379", "cluster": {"nodes": ["h:7000"]}},
            "redis: set only one of url, sentinel, cluster (found cluster, url)",
        ),
        ({"cluster": {"nodes": ["no-port"]}}, "redis.cluster.nodes[0]: 'no-port' is not host:port"),
        ({"cluster": {"nodes": []}}, "redis.cluster.nodes"),
        ({"sentinel": {"nodes": ["h:26379"]}}, "redis.sentinel.service: is required"),
        ({"claim_replicas": 1}, "claim_replicas needs a Redis with replicas"),
        (
            {"url": "redis://h", "claim_replicas": 1, "claim_replicas_timeout": "2s"},
            "claim_replicas_timeout must be shorter than socket_timeout",
        ),
        ({"url": "unix:///tmp/r.sock", "tls": {"enabled": True}}, "tls does not apply"),
    ],
)
def test_topology_settings_are_validated(redis_section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_from_dict({"redis": redis_section})
    assert message in str(caught.value)


def test_topologies_and_tls_options(tmp_path: Path) -> None:
    sentinel = settings_from_dict(
        {"redis": {"sentinel": {"nodes": ["10.0.0.1:26379"], "service": "main"}}}
    ).redis
    assert sentinel.topology == "sentinel"
    assert tls_options(sentinel) == {}
    cluster = settings_from_dict(
        {"redis": {"cluster": {"nodes": ["10.0.0.1:7000"]}, "tls": {"enabled": True}}}
    ).redis
    assert cluster.topology == "cluster"
    assert tls_options(cluster)["ssl_cert_reqs"] == "required"
    ca = private_ca(tmp_path).ca_file  # loaded when the config is read
    single = settings_from_dict(
        {"redis": {"url": "rediss://cache:6380", "tls": {"ca": ca, "verify": False}}}
    ).redis
    assert single.topology == "single"
    assert tls_options(single) == {
        "ssl_ca_certs": ca,
        "ssl_certfile": None,
        "ssl_keyfile": None,
        "ssl_cert_reqs": "none",
        "ssl_check_hostname": False,
    }


@pytest.mark.parametrize(
    ("name", "topology"),
    [
        ("redis-single-tls.yaml", "single"),
        ("redis-sentinel.yaml", "sentinel"),
        ("redis-cluster.yaml", "cluster"),
    ],
)
def test_example_configs_load(
    name: str, topology: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("IDEM_REDIS_PASSWORD", "secret")
    monkeypatch.setenv("IDEM_REDIS_CA", private_ca(tmp_path).ca_file)  # the TLS example's
    settings = load_settings(Path(__file__).parent.parent / "config" / name)
    assert settings.redis.topology == topology


async def test_a_claim_whose_wait_failed_is_released(
    master_and_replica: tuple[RedisServer, RedisServer],
) -> None:
    """The script ran and claimed the key, then its WAIT failed (here UNBLOCKED by an
    operator; a node turned replica in a failover fails alike): no replica is known to hold
    the claim, so it is given back and the caller gets StoreUnavailable (a 503)."""
    master, replica = master_and_replica
    settings = RedisSettings(
        url=master.url, socket_timeout=5.0, claim_replicas=1, claim_replicas_timeout=4.0
    )
    store = make_store(master.url, settings, replicas=1, replicas_timeout=4.0)
    assert replica.process is not None
    assert await store.ready()  # the scripts are loaded: the claim is one EVALSHA and WAIT
    replica.process.send_signal(signal.SIGSTOP)  # the WAIT blocks: no acknowledgement comes
    try:
        claim = asyncio.ensure_future(store.claim("idem:{t:w}", "f", "tok", 30.0))
        direct = redis.Redis.from_url(master.url)
        try:

            def waiting() -> list[int]:  # blocked (flag b) in a WAIT
                return [
                    c["id"]
                    for c in direct.client_list()
                    if c.get("cmd") == "wait" and "b" in c.get("flags", "")
                ]

            await until(lambda: bool(waiting()))
            [blocked] = waiting()
            assert direct.client_unblock(blocked, error=True)
            with pytest.raises(StoreUnavailable, match="0 of 1 replicas"):
                await asyncio.wait_for(claim, timeout=3.0)  # not the WAIT's own 4 s
            assert direct.exists("idem:{t:w}") == 0  # released, not left PENDING
        finally:
            direct.close()
    finally:
        replica.process.send_signal(signal.SIGCONT)
        await store.close()


async def test_an_unacknowledged_takeover_of_a_lost_owners_key_gives_it_back_as_lost(
    master_and_replica: tuple[RedisServer, RedisServer],
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
) -> None:
    """A retry that takes over a lost owner's key, with no replica to acknowledge it, answers
    503 and leaves the key as it found it (lost, its lease over), never deleted: the retry
    after it must not run the call as new."""
    master, replica = master_and_replica
    counting, origin = upstream
    settings = settings_from_dict(
        {
            "redis": {"url": master.url, "claim_replicas": 1, "claim_replicas_timeout": "200ms"},
            "routes": [
                {"name": "api", "path_prefix": "/", "upstream": origin, "on_owner_lost": "record"}
            ],
        }
    )
    client = await make_gateway(settings=settings, url=master.url)
    key = {"Idempotency-Key": "lost-owner"}
    route, (rkey, _) = locate(settings, "api", [], key["Idempotency-Key"])  # format 1's name
    fp = fingerprint(route.fingerprint, "POST", "/pay", "", (), b"1")
    dead = make_store(master.url)
    try:  # a gateway that claimed, sent and died: its lease runs out unrenewed
        assert (await dead.claim(rkey, fp, "dead", 0.1, route.retention)).outcome.value == "CLAIMED"
    finally:
        await dead.close()

    replica.stop()
    wait_until(lambda: SentinelServers.replicas_online(master) == 0, 10, "replica gone")
    statuses: list[int] = []

    async def refused() -> bool:
        resp = await client.post("/pay", data=b"1", headers=key)
        statuses.append(resp.status)
        return resp.status == 503

    await until(refused, timeout=10, every=0.05)
    with redis.Redis.from_url(master.url) as direct:
        fields = direct.hgetall(rkey)
        assert fields[b"s"] == b"P" and b"l" in fields
    replica.start()
    wait_until(lambda: SentinelServers.replicas_online(master) == 1, 10, "replica back")
    held = await client.post("/pay", data=b"1", headers=key)
    assert held.status == 502 and (await held.json())["code"] == "owner-lost"
    assert counting.count("/pay", "lost-owner") == 0
