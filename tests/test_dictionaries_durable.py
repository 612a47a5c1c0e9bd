"""A record needs nothing but itself: a route's trained dictionary lost in a failover, deleted,
evicted, gone with a Redis that restarted empty, taken by another gateway's, or damaged never
loses an answer or answers another. Each case through gateways on a real Redis (Sentinel and
Cluster where the case is one of theirs), the gateways started afresh before the retries, as
after a restart (one that knew the dictionary in memory would hide its loss)."""

from __future__ import annotations

import asyncio
import itertools
import secrets
import signal
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
import redis
from aiohttp import web
from aiohttp.test_utils import TestClient
from redis.cluster import key_slot

from gateway.core.compact import Codec
from gateway.core.keys import digest, record_names, tenant_id
from gateway.core.redaction import KEEP
from gateway.http.app import SERVICES
from gateway.store.store import Store
from gateway.store.trained import MARGIN, SAMPLES, dictionary_key
from testkit.polling import until
from testkit.redis_server import RedisServer
from testkit.topologies import SERVICE, ClusterServers, SentinelServers, client, slot_owner

from .gateways import GatewayFactory, gateway_settings
from .upstream import serving_app

RETENTION = 60.0


class Payments:
    """An upstream of payments: every answer its own customer and payment ids, as a real
    one's are (what a dictionary must not learn), counted."""

    def __init__(self) -> None:
        self.calls = 0
        self.customers: list[str] = []

    async def pay(self, request: web.Request) -> web.Response:
        await request.read()
        self.calls += 1
        customer = "cus_" + secrets.token_hex(8)
        self.customers.append(customer)
        body = {
            "id": f"pay_{secrets.token_hex(6)}",
            "object": "payment",
            "customer": customer,
            "amount": 100 + self.calls,
            "currency": "eur",
            "status": "succeeded",
        }
        headers = {"Cache-Control": "no-store", "Location": f"/v1/payments/{body['id']}"}
        return web.json_response(body, status=201, headers=headers)


@pytest.fixture
async def payments() -> AsyncIterator[tuple[Payments, str]]:
    api = Payments()
    app = web.Application()
    app.router.add_post("/{tail:.*}", api.pay)
    async with serving_app(app) as origin:
        yield api, origin


Answers = dict[str, tuple[int, bytes]]
_keys = itertools.count()


async def pay(gateway: TestClient, count: int, answers: Answers, tag: str = "k") -> None:
    """`count` new keys, each answered 201; their answers kept by key."""
    for _ in range(count):
        key = f"{tag}-{next(_keys)}"
        answer = await gateway.post("/pay", data=b"{}", headers={"Idempotency-Key": key})
        assert answer.status == 201, await answer.read()
        answers[key] = (answer.status, await answer.read())


async def pay_some(gateway: TestClient, count: int, answers: Answers) -> None:
    """`count` new keys; those answered 201 kept (a claim Redis could not take is 503)."""
    for _ in range(count):
        key = f"some-{next(_keys)}"
        answer = await gateway.post("/pay", data=b"{}", headers={"Idempotency-Key": key})
        if answer.status == 201:
            answers[key] = (answer.status, await answer.read())
        else:
            assert answer.status == 503, await answer.read()


async def replays(gateway: TestClient, answers: Answers) -> dict[str, str]:
    """Every key retried: those whose answer is not their first one's, and what came."""
    wrong = {}
    for key, (status, body) in answers.items():
        answer = await gateway.post("/pay", data=b"{}", headers={"Idempotency-Key": key})
        got = await answer.read()
        if (answer.status, got) != (status, body) or "Idempotent-Replayed" not in answer.headers:
            wrong[key] = f"{answer.status} {got[:80]!r}"
    return wrong


async def pay_named(
    gateway: TestClient, plain: redis.Redis, number: int, count: int, answers: Answers
) -> int:
    """New keys until `count` records name dictionary `number`, theirs kept by key; how many
    keys were sent. A record written while its gateway has not seen the dictionary in Redis
    lately (a keeper's round late on a loaded host) names the shipped one."""
    sent = 0
    while len(answers) < count:
        assert sent < 20 * count, f"{len(answers)} of {sent} records name dictionary {number}"
        one: Answers = {}
        await pay(gateway, 1, one, "named")
        sent += 1
        ((key, answer),) = one.items()
        value = plain.get(record_names("idem", "api", tenant_id([""]), digest(key))[1])
        needs = Codec.needs(value or b"")
        if needs is not None and needs.number == number:
            answers[key] = answer
    return sent


def store_of(gateway: TestClient) -> Store:
    store: Store = gateway.server.app[SERVICES].store
    return store


async def trained(gateway: TestClient) -> str:
    """Train the route's dictionary (SAMPLES answers) and wait until the gateway writes with
    it: the dictionary's key. Its keeper looks every 0.5 s (a record names the dictionary
    within a second of a look: a loaded host's rounds come late)."""
    store = store_of(gateway)
    store.trained.refresh = 0.5
    await until(lambda: store.trained.writer("api", RETENTION) is not None, timeout=30)
    own = store.trained.writer("api", RETENTION)
    assert own is not None
    return dictionary_key("idem", "api", own.number)


def settings(origin: str, **redis_settings: Any) -> Any:
    return gateway_settings(
        origin, redis={"record_format": 2, **redis_settings}, retention=f"{RETENTION:.0f}s"
    )


@pytest.fixture
def sentinel() -> Iterator[SentinelServers]:
    servers = SentinelServers()
    try:
        servers.start()
        yield servers
    finally:
        servers.close()


async def test_a_dictionary_a_failover_lost_is_put_back_and_every_answer_replays(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], sentinel: SentinelServers
) -> None:
    """Sentinel, claim_replicas 1. The dictionary reached the master and not its replica
    (the replica's copy deleted by hand, as if it never came); the replica is promoted. A
    gateway that knows the dictionary puts it back on the new master; records written while
    it was gone name the shipped one. Fresh gateways then replay every answer."""
    api, origin = payments
    redis_settings = {
        "sentinel": {"nodes": [sentinel.sentinel_node], "service": SERVICE},
        "claim_replicas": 1,
    }
    gateway = await make_gateway(settings(origin, **redis_settings))
    answers: Answers = {}
    await pay(gateway, SAMPLES, answers)
    key = await trained(gateway)
    await pay(gateway, 50, answers)
    with client(sentinel.replica) as replica:
        replica.config_set("replica-read-only", "no")
        assert replica.delete(key) == 1, "the replica had it: claim_replicas waited for it"
    await asyncio.to_thread(sentinel.fail_over)
    await pay(gateway, 50, answers, "after")
    with client(sentinel.replica) as promoted:
        await until(lambda: promoted.exists(key), timeout=20)
    await pay(gateway, 50, answers, "put-back")
    await gateway.close()
    fresh = await make_gateway(settings(origin, **redis_settings))
    assert await replays(fresh, answers) == {}
    assert api.calls == len(answers)


@pytest.mark.timeout(120)
async def test_a_dictionary_a_cluster_failover_lost_never_loses_a_record(
    make_gateway: GatewayFactory, payments: tuple[Payments, str]
) -> None:
    """A Cluster of three masters, each with a replica, claim_replicas 1. The replica of the
    shard that holds the route's dictionaries is stopped while the route trains one: it never
    gets it, and the dictionary is not written with (its replica never acknowledged it);
    records sit on every other shard. The master dies and that replica takes over: fresh
    gateways replay every answer."""
    api, origin = payments
    cluster = ClusterServers(masters=3, replicated=True)
    try:
        await asyncio.to_thread(cluster.start)
        master = slot_owner(cluster.servers, key_slot(dictionary_key("idem", "api").encode()))
        replica = cluster.replicas[cluster.servers.index(master)]
        redis_settings = {
            "cluster": {"nodes": cluster.nodes},
            "claim_replicas": 1,
            "claim_replicas_timeout": "100ms",  # the stopped shard's claims refused sooner
        }
        gateway = await make_gateway(settings(origin, **redis_settings))
        answers: Answers = {}
        assert replica.process is not None
        replica.process.send_signal(signal.SIGSTOP)
        try:
            await pay_some(gateway, 2 * SAMPLES, answers)  # its shard's claims are refused
            store = store_of(gateway)
            store.trained.refresh = 0.1
            await until(lambda: not store.trained._tasks, timeout=30)  # trained, and stored
            assert store.trained.writer("api", RETENTION) is None, "not acknowledged: unused"
            await pay_some(gateway, 50, answers)
        finally:
            replica.process.send_signal(signal.SIGCONT)
        await asyncio.to_thread(master.stop, True)  # SIGKILL
        with client(replica) as each:
            each.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
            await until(lambda: each.info("replication")["role"] == "master", timeout=20)
        await gateway.close()
        fresh = await make_gateway(settings(origin, **redis_settings))
        assert await replays(fresh, answers) == {}
        assert api.calls >= len(answers)
    finally:
        await asyncio.to_thread(cluster.close)


async def test_gateways_that_each_trained_one_read_each_others_records(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], redis_url: str
) -> None:
    """The first gateway's dictionary lost (deleted, with the route's pointer to it): a
    second trains its own. Each is named by its content, so neither takes the other's name,
    and the first puts its own back: every record of both replays, after both restart."""
    api, origin = payments
    first = await make_gateway(settings(origin))
    answers: Answers = {}
    await pay(first, SAMPLES, answers)
    one = await trained(first)
    plain = redis.Redis.from_url(redis_url)
    try:
        await store_of(first).trained.close()  # it puts nothing back for a while
        plain.delete(one, dictionary_key("idem", "api"))
        second = await make_gateway(settings(origin))
        await pay(second, SAMPLES, answers, "second")
        two = await trained(second)
        assert two != one
        await pay(first, 50, answers, "first-again")
        await pay(second, 50, answers, "second-again")
        store_of(first).trained.start()
        await until(lambda: plain.exists(one), timeout=10)
    finally:
        plain.close()
    await first.close()
    await second.close()
    fresh = await make_gateway(settings(origin))
    assert await replays(fresh, answers) == {}
    assert api.calls == len(answers)


async def test_a_deleted_dictionary_is_put_back_by_a_gateway_that_knows_it(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], redis_url: str
) -> None:
    """Every dictionary of the route deleted by hand (as an operator cleaning up a route
    might): the gateway that knows it puts it back, and the records replay after it stops."""
    _, origin = payments
    gateway = await make_gateway(settings(origin))
    answers: Answers = {}
    await pay(gateway, SAMPLES, answers)
    key = await trained(gateway)
    await pay(gateway, 50, answers)
    plain = redis.Redis.from_url(redis_url)
    try:
        assert plain.delete(*plain.keys("idem:dictionary:*")) >= 1
        await until(lambda: plain.exists(key), timeout=10)
    finally:
        plain.close()
    await gateway.close()
    fresh = await make_gateway(settings(origin))
    assert await replays(fresh, answers) == {}


async def test_a_lost_pointer_is_put_back_so_that_a_gateway_started_after_keeps_the_dictionary(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], redis_url: str
) -> None:
    """The route's pointer taken (evicted, say: it is a key as any other): the gateway that
    writes with the dictionary names it again. A gateway started after it then knows the
    dictionary from the start, and puts it back when it goes in turn; without the pointer it
    would know none, and the dictionary, once gone, would take its records with it."""
    _, origin = payments
    gateway = await make_gateway(settings(origin))
    answers: Answers = {}
    await pay(gateway, SAMPLES, answers)
    key = await trained(gateway)
    pointer = dictionary_key("idem", "api")
    plain = redis.Redis.from_url(redis_url)
    try:
        named = plain.get(pointer)
        assert named is not None and plain.delete(pointer) == 1
        await until(lambda: plain.get(pointer) == named, timeout=10)
        await pay(gateway, 50, answers)
        await gateway.close()
        fresh = await make_gateway(settings(origin))
        assert plain.delete(key) == 1
        await until(lambda: plain.exists(key), timeout=25)  # its keeper's next round: 10 s
    finally:
        plain.close()
    assert await replays(fresh, answers) == {}


async def test_a_stopping_gateway_puts_back_a_dictionary_gone_since_its_last_round(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], redis_url: str
) -> None:
    """The dictionary taken (evicted, say) after its gateway's last round of keeping, and that
    gateway, the only one to know it, stopped: it puts the dictionary back as it stops, and
    another gateway replays the records."""
    _, origin = payments
    gateway = await make_gateway(settings(origin))
    answers: Answers = {}
    await pay(gateway, SAMPLES, answers)
    key = await trained(gateway)
    own = store_of(gateway).trained.writer("api", RETENTION)
    assert own is not None
    named: Answers = {}
    plain = redis.Redis.from_url(redis_url)
    try:
        await pay_named(gateway, plain, own.number, 20, named)
        await store_of(gateway).trained.close()  # no round of its own from here on
        assert plain.delete(key) == 1
        await gateway.close()
        assert plain.exists(key)
    finally:
        plain.close()
    fresh = await make_gateway(settings(origin))
    assert await replays(fresh, named) == {}


async def test_records_written_after_redis_came_back_empty_replay_after_a_restart(
    make_gateway: GatewayFactory, payments: tuple[Payments, str]
) -> None:
    """Redis restarted without persistence (or from an older backup): its records and the
    dictionary are gone. A gateway that knew the dictionary writes on; what it records
    from then on replays after it restarts."""
    _, origin = payments
    server = RedisServer()
    await asyncio.to_thread(server.start)
    try:
        gateway = await make_gateway(settings(origin), url=server.url)
        await pay(gateway, SAMPLES, {})
        key = await trained(gateway)
        await asyncio.to_thread(server.stop)
        await asyncio.to_thread(server.start)  # the same port, empty
        answers: Answers = {}
        for _ in range(40):  # its first calls meet the restart
            await gateway.post("/pay", data=b"{}", headers={"Idempotency-Key": "warm-up"})
        await pay(gateway, 100, answers, "since")
        with redis.Redis.from_url(server.url) as plain:
            await until(lambda: plain.exists(key), timeout=10)
        await pay(gateway, 50, answers, "later")
        await gateway.close()
        fresh = await make_gateway(settings(origin), url=server.url)
        assert await replays(fresh, answers) == {}
    finally:
        await asyncio.to_thread(server.close)


async def test_an_evicting_redis_takes_records_before_the_dictionary_they_need(
    make_gateway: GatewayFactory, payments: tuple[Payments, str]
) -> None:
    """`accept_eviction` with allkeys-lru, Redis full: records are evicted, as an evicting
    Redis does; every record still there replays (its dictionary was not taken first)."""
    _, origin = payments
    server = RedisServer(extra=["--maxmemory-policy", "allkeys-lru"])
    await asyncio.to_thread(server.start)
    try:
        config = settings(origin, accept_eviction=True)
        gateway = await make_gateway(config, url=server.url)
        answers: Answers = {}
        await pay(gateway, SAMPLES, answers)
        await trained(gateway)
        with redis.Redis.from_url(server.url) as plain:
            used = int(plain.info("memory")["used_memory"])
            plain.config_set("maxmemory", str(used + 200_000))
            for _ in range(30):
                await pay(gateway, 100, answers, "full")
                await asyncio.sleep(0)  # each round's touch of the dictionary
            evicted = int(plain.info("stats")["evicted_keys"])
        assert evicted > 100, "Redis evicted records"
        await gateway.close()
        fresh = await make_gateway(config, url=server.url)
        live = {}
        for key, answer in answers.items():
            retry = await fresh.post("/pay", data=b"{}", headers={"Idempotency-Key": key})
            got = await retry.read()
            if "Idempotent-Replayed" in retry.headers:
                live[key] = (retry.status, got) == answer
            else:
                assert retry.status == 201, (key, retry.status, got)  # evicted: run again
        assert live and all(live.values()), [key for key, right in live.items() if not right]
    finally:
        await asyncio.to_thread(server.close)


@pytest.mark.parametrize("where", ["content", "head"])
async def test_a_damaged_dictionary_answers_record_corrupt_never_another_answer(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], redis_url: str, where: str
) -> None:
    """One bit of the stored dictionary flipped (in its content, or in zstd's head of it): a
    gateway that does not know it answers its records 502 record-corrupt, never a 201 with
    other bytes, and starts, and answers other keys, all the same; once the gateway that
    knows it puts it right, they replay."""
    api, origin = payments
    knows = await make_gateway(settings(origin))
    answers: Answers = {}
    await pay(knows, SAMPLES, answers)
    key = await trained(knows)
    own = store_of(knows).trained.writer("api", RETENTION)
    assert own is not None
    named: Answers = {}
    plain = redis.Redis.from_url(redis_url)
    try:
        sent = await pay_named(knows, plain, own.number, 40, named)
        await store_of(knows).trained.close()  # it puts nothing right for a while
        stored = bytearray(plain.get(key) or b"")
        at = len(stored) // 2 if where == "content" else 11 + 10  # past the stored head
        stored[at] ^= 0x10
        plain.set(key, bytes(stored), keepttl=True)
        fresh = await make_gateway(settings(origin))
        for name in named:
            answer = await fresh.post("/pay", data=b"{}", headers={"Idempotency-Key": name})
            assert answer.status == 502, (name, answer.status, await answer.read())
            assert orjson.loads(await answer.read())["code"] == "record-corrupt"
        await pay(fresh, 5, {}, "other")  # the gateway serves on
        store_of(knows).trained.start()
        await until(lambda: plain.get(key) != bytes(stored), timeout=10)
        again = await make_gateway(settings(origin))
        assert await replays(again, named) == {}
    finally:
        plain.close()
    assert api.calls == len(answers) + sent + 5


async def test_a_dictionary_holds_no_answers_particulars_and_ends_with_its_records(
    make_gateway: GatewayFactory, payments: tuple[Payments, str], redis_url: str
) -> None:
    """What one answer alone holds (its customer id) is never learnt; what the dictionary
    holds ends with the last record that may name it, plus MARGIN."""
    api, origin = payments
    gateway = await make_gateway(settings(origin))
    await pay(gateway, SAMPLES, {})
    key = await trained(gateway)
    plain = redis.Redis.from_url(redis_url)
    try:
        stored = plain.get(key) or b""
        learnt = [customer for customer in api.customers if customer[4:10].encode() in stored]
        assert learnt == [], f"{len(learnt)} of {len(api.customers)} customers in it"
        assert b"cus_" in stored and b"succeeded" in stored, "what they all share is learnt"
        assert 0 < plain.pttl(key) <= (RETENTION + MARGIN) * 1000
    finally:
        plain.close()
    assert KEEP > 1
