"""The owner-lost takeover under faults: a key whose owner stopped renewing its lease after
it may have sent never runs again on `record`/`keep`/`reconcile` routes, and an answer a
client was given is the record's, when the takeover's reply from Redis is lost, late or cut
off, when the lost owner was only frozen and resumes, and when retries race on several
gateways. The policies themselves are tested in test_owner_lost.py; both use the kit in
lostowner.py."""

from __future__ import annotations

import asyncio
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config.policy import Policy
from gateway.core.backoff import STORE_AGAIN
from gateway.core.claims import Claim
from gateway.core.record import Record
from gateway.errors import StoreUnavailable
from gateway.store.breaker import CircuitBreaker
from gateway.store.store import Store
from gateway.telemetry.logs import FIELDS
from testkit.polling import until
from testkit.procs import GatewayProcess
from testkit.redis_server import RedisServer
from testkit.stores import make_store
from testkit.topologies import SentinelServers

from .faultkit import metrics_of, records, value
from .gateways import AdminFactory, GatewayFactory, gateway_settings
from .loopback import connecting_to, full_listener, make_room
from .lostowner import (
    AUTH,
    DEAD,
    KEY,
    Answer,
    claim_as_dead_owner,
    code,
    located,
    lookup_app,
    post,
    process_config,
    reconcile,
    retry,
    settled,
)
from .upstream import CountingUpstream, serving_app

# A Redis in between: passes every byte, and does to the replies what a test arms it to.


class RedisProxy:
    """A TCP proxy to Redis on loopback. `cut_on` (bytes): the first reply that holds them
    is never delivered, both connections reset (the script ran, its reply is lost).
    `delay_on`: replies that hold them are held back for `delay` seconds; `drop`: every
    byte is dropped from then on, both ways (set by the first reply holding `drop_after`,
    which is delivered). `refuse`: every connection reset and every new one refused while it
    is set (a Redis killed, as a client of it sees it)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._refuse = False
        self.refused = 0  # connections refused while `refuse` was set
        self.cut_on: bytes | None = None
        self.delay_on: bytes | None = None
        self.delay = 0.0
        self.drop = False  # every byte dropped, both ways: a black hole (a partition)
        self.drop_after: bytes | None = None  # the reply that holds them is the last one
        self.cuts = 0
        self.delivered = 0  # writes of replies passed on to the gateway
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def refuse(self) -> bool:
        return self._refuse

    @refuse.setter
    def refuse(self, refuse: bool) -> None:
        self._refuse = refuse
        if refuse:
            for writer in self._writers:
                writer.transport.abort()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse:
            self.refused += 1
            writer.transport.abort()
            return
        self._writers.append(writer)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers.append(up_writer)

        async def upward() -> None:
            while data := await reader.read(65536):
                if self.drop:
                    continue
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downward() -> None:
            while data := await up_reader.read(65536):
                if self.drop:
                    continue
                if self.cut_on is not None and self.cut_on in data:
                    self.cut_on = None
                    self.cuts += 1
                    writer.transport.abort()
                    up_writer.transport.abort()
                    return
                if self.drop_after is not None and self.drop_after in data:
                    self.drop_after, self.drop = None, True
                if self.delay_on is not None and self.delay_on in data:
                    await asyncio.sleep(self.delay)
                writer.write(data)
                self.delivered += 1
                await writer.drain()
            writer.close()

        for job in (upward(), downward()):
            task = asyncio.ensure_future(job)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


@asynccontextmanager
async def proxied(redis_url: str) -> AsyncIterator[RedisProxy]:
    proxy = RedisProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


# The key in Redis, read as Redis has it.


def lease_over(redis_url: str, key: str) -> bool:
    client = redis.Redis.from_url(redis_url)
    try:
        seconds, micros = client.time()
        return int(client.hget(key, "l") or 0) <= seconds * 1000 + micros // 1000
    finally:
        client.close()


def settled_is_due(redis_url: str) -> bool:
    """The dead owner's lease is over (Redis's clock)."""
    client = redis.Redis.from_url(redis_url)
    try:
        [key] = list(client.scan_iter())
    finally:
        client.close()
    return lease_over(redis_url, key.decode())


def records_state(redis_url: str) -> bytes | None:
    client = redis.Redis.from_url(redis_url)
    try:
        [key] = list(client.scan_iter())
        state: bytes | None = client.hget(key, "s")
        return state
    finally:
        client.close()


def taken_over(redis_url: str) -> bool:
    """A retry took the key over from its lost owner (claim.lua keeps the owner's token)."""
    return any(b"p" in record for record in records(redis_url))


async def retry_taking_over(
    redis_url: str, gw: TestClient, link: RedisProxy | None = None
) -> asyncio.Future[Answer]:
    """A retry on `gw` under way, once it has taken over the key its owner left (the
    owner's answer not in yet): its answer comes when the retry has settled the key. With
    the `link` `gw` reaches Redis by, once the retry has the takeover's reply as well: Redis
    holds the takeover before its reply reaches the gateway, and a link cut in between
    fails the claim itself (503, fail closed), not the wait for the owner's answer."""
    retried = asyncio.ensure_future(settled(gw))
    await until(lambda: taken_over(redis_url), timeout=10)
    if link is not None:  # replies pass in order: the takeover's, then one the wait asked for
        seen = link.delivered
        await until(lambda: link.delivered >= seen + 2, timeout=10)
    return retried


# The lost owner, frozen rather than dead, resumes; a lookup that cannot tell.


async def owner_comes_back(redis_url: str, gw: TestClient, body: bytes) -> bool:
    """The frozen owner resumes: its upstream answered 201 `body`, and it completes the claim
    as forward.py does (True: stored; False: fenced, its client gets the answer marked
    `Idempotency-Outcome: fenced`)."""
    rkey, fp, retention = located(gw)
    record = Record(
        status=201,
        headers=[("Content-Type", "text/plain")],
        size=len(body),
        sha256="",
        completed_at=time.time(),
        reason="Created",
    )
    store = make_store(redis_url)
    try:
        return await store.complete(rkey, DEAD, fp, record, body, retention)
    finally:
        await store.close()


@asynccontextmanager
async def lookup_answering(status: int) -> AsyncIterator[tuple[list[int], str]]:
    """A reconcile lookup that always answers `status` (500: unclear); the list counts asks."""
    asked: list[int] = []

    async def find(request: web.Request) -> web.Response:
        asked.append(1)
        return web.json_response({"id": "pay_found"}, status=status)

    async with serving_app(lookup_app(find)) as origin:
        yield asked, origin


# The takeover's reply from Redis lost or late, and gateways cut off from Redis: never a
# second run.


# How the store talks to Redis: the RESP pipeline and the RedisPyPipeline on redis-py's
# connections send a call once more on a broken connection (resp_pipeline.py, redispy_pipeline.py:
# "the scripts recognise a repeated call by its token": a repeated takeover answers TAKEN again);
# one redis-py call at a time does not (its Retry has no error to retry on).
REDIS_PATHS = [
    pytest.param({"pipeline": True, "pipeline_client": "resp"}, id="resp"),
    pytest.param({"pipeline": True, "pipeline_client": "redis-py"}, id="coalescer"),
    pytest.param({"pipeline": False}, id="redis-py"),
]


@pytest.mark.parametrize("redis_path", REDIS_PATHS)
async def test_a_takeover_whose_reply_is_lost_never_runs_the_call_again(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    redis_path: dict[str, Any],
) -> None:
    """The connection to Redis breaks after the takeover ran and before its reply came: the
    store sends the claim once more, as it does for any call (the scripts are meant to
    recognise a repeat by its token). The repeat must not turn the takeover into a claim of
    a free key: the lost owner may have run the call."""
    counting, origin = upstream
    counting.release.set()
    blob = {"url": f"file://{tmp_path}/blobs"}
    settings = gateway_settings(origin, redis_path, blob, on_owner_lost="record")
    async with proxied(redis_url) as proxy:
        gw = await make_gateway(settings=settings, url=proxy.url)
        await claim_as_dead_owner(redis_url, gw)
        proxy.cut_on = b"TAKEN"
        answer = await settled(gw)
        assert proxy.cuts == 1
    assert counting.count("/gate") == 0, answer
    assert answer[0] in (502, 503)


async def test_a_waiting_duplicates_takeover_whose_reply_is_lost_never_frees_the_key(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """`on_in_flight: wait`: the duplicate's claim takes the lost owner's key over and its
    reply is lost; the repeat says CLAIMED, the duplicate takes it for a request that ended
    unrecorded and releases it (DEL): the next retry runs the call as new."""
    counting, _ = upstream
    counting.release.set()
    async with proxied(redis_url) as proxy:
        gw = await make_gateway(
            url=proxy.url, on_owner_lost="record", on_in_flight="wait", in_flight_wait="10s"
        )
        await claim_as_dead_owner(redis_url, gw, lease=1.0)
        proxy.cut_on = b"TAKEN"
        waited = await post(gw)  # waits the lease out; its takeover's reply is cut
        assert proxy.cuts == 1, waited
        answer = await settled(gw)
    assert counting.count("/gate") == 0, (waited, answer)


async def test_a_claim_answered_503_not_forwarded_is_not_held_as_an_unknown_outcome(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """Redis ran the claim but its reply came after the socket timeout: the client is told
    503 "the request was not forwarded" (true: nothing was). Its retry after the lease must
    run the call, as it did before the lease became a field; it gets 502 owner-lost ("whether
    the upstream ran it is unknown") for the whole retention instead."""
    counting, _ = upstream
    counting.release.set()
    async with proxied(redis_url) as proxy:
        gw = await make_gateway(url=proxy.url, lease="500ms", on_owner_lost="record")
        proxy.delay_on, proxy.delay = b"CLAIMED", 1.5
        first = await post(gw)
        assert first[0] == 503 and code(first) == "store-unavailable"
        proxy.delay_on = None
        answer = await settled(gw)
    assert answer[0] == 201 and counting.count("/gate") == 1, answer


@pytest.mark.parametrize("socket_timeout", ["1s", "3s"])
async def test_redis_frozen_longer_than_the_lease_keeps_the_live_owners_answer(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    own_redis: Any,
    tmp_path: Path,
    socket_timeout: str,
) -> None:
    """Redis SIGSTOPped past the lease while a live owner's call runs, and a retry's claim
    waits in Redis's socket meanwhile (1s: its client gives up first, 503; 3s: it waits it
    out). SIGCONT: whatever Redis runs first, the call ran once and the answer the owner's
    client got is the record."""
    counting, origin = upstream
    blob = {"url": f"file://{tmp_path}/blobs"}
    redis_settings = {"socket_timeout": socket_timeout}
    settings = gateway_settings(origin, redis_settings, blob, on_owner_lost="record", lease="1s")
    one = await make_gateway(settings=settings, url=own_redis.url)
    two = await make_gateway(settings=settings, url=own_redis.url)
    first = asyncio.ensure_future(post(one))
    await asyncio.wait_for(counting.entered.wait(), 10)
    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)
    try:
        retry = asyncio.ensure_future(post(two))  # its claim waits in Redis's socket
        await asyncio.sleep(1.6)  # the fault's length: past the owner's last renewed lease
    finally:
        own_redis.process.send_signal(signal.SIGCONT)
    during = await retry
    assert during[0] in (409, 502, 503), during  # in flight, taken over, or given up
    counting.release.set()
    owners = await first
    answer = await settled(two)
    replay = await post(two)
    assert counting.count("/gate") == 1
    if owners[0] == 201:
        assert (replay[0], replay[2]) == (201, owners[2]), (during, owners, answer, replay)


async def test_claim_replicas_a_failover_never_turns_a_sent_key_into_an_unsent_one(
    redis_url: str,
) -> None:
    """`claim_replicas: 1` with `mark_sent`: the claim waits for the replica, the sent mark
    does not. The replica misses the mark (its link to the master drops it), the master
    dies and the replica is promoted: the key of an owner that sent and then died says
    "never sent", and the next claim runs it again. The mark must reach the replicas before
    a byte is sent (or fail, and nothing is sent)."""
    master = RedisServer()
    master.start()
    try:
        async with proxied(master.url) as link:
            replica = RedisServer(extra=["--replicaof", "127.0.0.1", str(link.port)])
            replica.start()
            try:
                await until(lambda: SentinelServers.replicas_online(master) == 1, timeout=10)
                outcome = await sent_then_failover(master, replica, link)
            finally:
                replica.close()
    finally:
        master.close()
    assert outcome in (None, Claim.TAKEN)


async def sent_then_failover(
    master: RedisServer, replica: RedisServer, link: RedisProxy
) -> Claim | None:
    """Claim (replicated), lose the link, mark sent, kill the master, promote the replica:
    what a retry's claim finds there (None: the mark failed, nothing would be sent)."""
    breaker = CircuitBreaker(1000, 1.0)
    store = make_store(master.url, breaker=breaker, replicas=1)
    try:
        claimed = await store.claim("idem:{sent}", "fp", "owner", 0.2, 60.0, mark_sent=True)
        assert claimed.outcome is Claim.CLAIMED
        link.drop = True
        try:
            await store.sent("idem:{sent}", "owner")
        except StoreUnavailable:
            return None
    finally:
        await store.close()
    master.stop(kill=True)  # the owner sent, then died with its master
    await link.close()
    promoted = redis.Redis.from_url(replica.url)
    try:
        promoted.replicaof("NO", "ONE")
    finally:
        promoted.close()
    store = make_store(replica.url, breaker=breaker)
    try:
        await until(lambda: lease_over(replica.url, "idem:{sent}"), timeout=5)
        retry = await store.claim("idem:{sent}", "fp", "retry", 1.0, 60.0, mark_sent=True)
    finally:
        await store.close()
    return retry.outcome


async def test_a_taker_that_loses_redis_before_it_records_journals_the_unknown_outcome(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """The takeover's reply comes, then Redis is gone: the UNKNOWN outcome goes to the
    journal (502 owner-lost, never a second run) and is stored once Redis is back."""
    counting, _ = upstream
    async with proxied(redis_url) as link:
        gw = await make_gateway(url=link.url, on_owner_lost="record", lease="1s")
        await claim_as_dead_owner(redis_url, gw)
        link.drop_after = b"TAKEN"
        answer = await settled(gw)
        assert answer[0] == 502 and code(answer) == "owner-lost", answer
        assert link.drop
        link.drop = False
        await until(lambda: records_state(redis_url) == b"U", timeout=10)
        replay = await post(gw)
    assert replay[0] == 502 and code(replay) == "outcome-unknown"
    assert counting.count("/gate") == 0


@pytest.mark.parametrize("taker_loses_redis", [False, True], ids=["taker-up", "taker-cut-too"])
async def test_an_owner_cut_off_from_redis_past_its_lease_gives_the_retry_its_journaled_answer(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    taker_loses_redis: bool,
) -> None:
    """Gateway A forwards the call, then loses Redis (its master killed in a failover): it
    journals the upstream's 201 and answers its client with it, but cannot renew its lease.
    A retry on gateway B past the lease takes the key over, and A's Redis comes back
    meanwhile: B must answer A's 201 once A stores it, not 502 unknown to a payload a client
    was told ran (the Sentinel run of record's violation), and nothing runs twice. B may
    lose Redis for a moment while it waits (the same failover): it asks again."""
    monkeypatch.setattr(STORE_AGAIN, "longest", 0.05)  # A stores soon after its link
    counting, _ = upstream
    async with proxied(redis_url) as link_a, proxied(redis_url) as link_b:
        gw_a = await make_gateway(url=link_a.url, on_owner_lost="record", lease="1s")
        gw_b = await make_gateway(url=link_b.url, on_owner_lost="record", lease="1s")
        first = asyncio.ensure_future(post(gw_a))
        await counting.entered.wait()
        link_a.refuse = True
        counting.release.set()
        answered = await first
        assert (answered[0], answered[2]) == (201, b"gated #1"), answered
        retried = await retry_taking_over(redis_url, gw_b, link_b)
        if taker_loses_redis:  # B asks again in vain at least once before A's answer is in
            link_b.refuse = True
            await until(lambda: link_b.refused > 0, timeout=5)
        link_a.refuse = False
        await until(lambda: records_state(redis_url) == b"C", timeout=5)
        link_b.refuse = False
        answer = await retried
    assert (answer[0], answer[2]) == (201, b"gated #1"), answer
    assert answer[1]["Idempotent-Replayed"] == "true"
    assert counting.count("/gate") == 1


async def test_the_retry_waits_its_routes_late_answer_wait_before_it_settles_the_key(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """The request that took a lost owner's key over waits the route's `late_answer_wait`
    for that owner's own answer before it settles the key; by default three of a journaled
    answer's tries to store it."""
    assert Policy().late_answer_wait == 3 * STORE_AGAIN.longest
    gw = await make_gateway(on_owner_lost="record", late_answer_wait="3s")
    await claim_as_dead_owner(redis_url, gw)
    await until(lambda: settled_is_due(redis_url), timeout=5)
    began = time.monotonic()
    answer = await post(gw)
    assert answer[0] == 502 and code(answer) == "owner-lost"
    assert time.monotonic() - began >= 3.0


# A frozen owner that resumes: its answer is the record, or it sends nothing.


async def test_a_frozen_owner_that_resumes_after_a_kept_takeover_stores_its_answer(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """`keep` with a lookup that cannot tell: the retry takes the key over, asks, and lets it
    go as its lost owner's (409 owner-lost). The owner was only frozen (SIGSTOP, a long GC):
    it resumes with the upstream's 201. Its client gets that 201; the record must be it, as
    it is on `record` routes (complete.lua's 'p'), not 409 owner-lost for the retention."""
    counting, _ = upstream
    async with lookup_answering(500) as (asked, lookup):
        gw = await make_gateway(on_owner_lost="keep", reconcile=reconcile(lookup))
        await claim_as_dead_owner(redis_url, gw)
        answer = await settled(gw)
        assert answer[0] == 409 and code(answer) == "owner-lost" and asked
        stored = await owner_comes_back(redis_url, gw, b"the real answer")
        replay = await post(gw)
    assert counting.count("/gate") == 0
    assert stored and (replay[0], replay[2]) == (201, b"the real answer")


async def test_a_waiting_duplicate_does_not_hide_the_frozen_owner_from_its_key(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """`on_in_flight: wait`: a duplicate waits while the owner's lease lasts; the lease ends,
    its claim takes the key over and gives it back (409 owner-lost). A retry then holds it
    as unknown (502). The frozen owner resumes with its 201: by the design of complete.lua
    its answer replaces the unknown outcome. The duplicate's takeover put its own token in
    'p' (the lost owner's), so the real owner is fenced: its client has a 201, the key 502."""
    counting, _ = upstream
    gw = await make_gateway(on_owner_lost="record", on_in_flight="wait", in_flight_wait="10s")
    await claim_as_dead_owner(redis_url, gw, lease=1.5)
    waited = await post(gw)  # arrives while the lease lasts, waits it out
    assert waited[0] == 409 and code(waited) == "owner-lost", waited
    held = await post(gw)
    assert held[0] == 502 and code(held) == "owner-lost"
    stored = await owner_comes_back(redis_url, gw, b"the real answer")
    replay = await post(gw)
    assert counting.count("/gate") == 0
    assert stored and (replay[0], replay[2]) == (201, b"the real answer")


async def test_a_resolved_lost_owners_key_fences_the_owner_that_comes_back(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
) -> None:
    """An operator resolves a `keep` key whose owner was lost; the owner was only frozen and
    completes now. complete.lua takes it for a repeat of its own call (same token) and says
    stored: its client gets the upstream's 201 unmarked, while every replay is the
    operator's body. A completion that says stored must be the record."""
    counting, _ = upstream
    gw = await make_gateway(on_owner_lost="keep")
    admin = await make_admin(gw)
    await claim_as_dead_owner(redis_url, gw)
    answer = await settled(gw)
    assert answer[0] == 409 and code(answer) == "owner-lost"
    target = {"route": "api", "key": KEY["Idempotency-Key"], "status": 201, "body": "by hand"}
    assert (await admin.post("/keys/resolve", json=target, headers=AUTH)).status == 200
    stored = await owner_comes_back(redis_url, gw, b"the real answer")
    replay = await post(gw)
    assert counting.count("/gate") == 0
    if stored:  # the owner's client is answered 201 "the real answer", unmarked
        assert (replay[0], replay[2]) == (201, b"the real answer")


async def test_a_frozen_owner_that_resumes_during_the_takeovers_lookup_stores_its_answer(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """`record` with a lookup: the retry takes the key over and asks the lookup, which is
    slow. Meanwhile the frozen owner resumes with the upstream's 201 and completes: it is
    fenced (the key is PENDING under the taker), so its client gets the 201 marked fenced;
    the lookup then cannot tell, and the key is held as unknown (502) for the retention.
    The answer that really came must become the record, as it does once the key is U."""
    counting, _ = upstream
    asked = asyncio.Event()
    answer_it = asyncio.Event()

    async def find(request: web.Request) -> web.Response:
        asked.set()
        await answer_it.wait()
        return web.Response(status=500, text="lookup broke")

    async with serving_app(lookup_app(find)) as lookup:
        slow = {**reconcile(lookup), "timeout": "10s"}
        gw = await make_gateway(on_owner_lost="record", reconcile=slow)
        await claim_as_dead_owner(redis_url, gw)
        retry = asyncio.ensure_future(settled(gw))
        await asyncio.wait_for(asked.wait(), 10)
        stored = await owner_comes_back(redis_url, gw, b"the real answer")
        answer_it.set()
        held = await retry
        replay = await post(gw)
    assert held[0] == 502 and code(held) == "owner-lost"
    assert counting.count("/gate") == 0
    assert stored and (replay[0], replay[2]) == (201, b"the real answer")


async def test_mark_sent_an_owner_frozen_before_its_mark_sends_nothing_when_it_resumes(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    redis_store: Store,
) -> None:
    """Frozen between its claim and its `sent` mark: the retry runs it as new (UNSENT); the
    owner that resumes is refused the mark, so it never sends."""
    counting, _ = upstream
    counting.release.set()
    gw = await make_gateway(mark_sent=True, on_owner_lost="record")
    await claim_as_dead_owner(redis_url, gw, sent=False)
    answer = await settled(gw)
    assert (answer[0], answer[2]) == (201, b"gated #1")
    rkey, _, _ = located(gw)
    assert not await redis_store.sent(rkey, DEAD)
    assert counting.count("/gate") == 1


async def test_a_gateway_held_up_past_its_lease_before_sending_sends_nothing(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Gateway A's claim reply comes late (Redis slow, A stopped or starved): its lease ends
    before it can send. Meanwhile a retry on gateway B takes the key over, its lookup truly
    says the call never ran, and B runs it. When A goes on, it must not send the request it
    holds: the call would run twice (a lookup's 'not happened' stops being true once a
    stalled owner sends). A checks its lease by its own clock before the first byte."""
    counting, origin = upstream
    counting.release.set()

    async def find(request: web.Request) -> web.Response:  # the upstream's own view
        ran = counting.count("/gate") > 0
        return web.json_response({"id": "pay_found"}, status=200 if ran else 404)

    async with serving_app(lookup_app(find)) as lookup, proxied(redis_url) as slow:
        route = {"on_owner_lost": "record", "lease": "1s", "reconcile": reconcile(lookup)}
        slow_redis = gateway_settings(origin, {"socket_timeout": "5s"}, **route)
        gw_a = await make_gateway(settings=slow_redis, url=slow.url)
        gw_b = await make_gateway(**route)
        slow.delay_on, slow.delay = b"CLAIMED", 2.0
        held_up = asyncio.ensure_future(post(gw_a, request_id="owner"))
        await until(lambda: bool(records(redis_url)), timeout=5)  # A's claim ran in Redis
        await until(lambda: settled_is_due(redis_url), timeout=5)
        ran = await settled(gw_b, request_id="retry")
        assert ran[0] == 201 and ran[1]["Idempotency-Outcome"] == "not-happened"
        late = await held_up
    assert late[0] == 503 and code(late) == "lease-expired"
    assert counting.count("/gate") == 1
    # Each gateway's log says what it did in fields, under its request's id.
    said = [getattr(r, FIELDS) for r in caplog.records if "event" in getattr(r, FIELDS, {})]
    assert sorted(said, key=lambda fields: str(fields["request_id"])) == [
        {"event": "not-sent-late", "route": "api", "request_id": "owner"},
        {"event": "owner-lost", "route": "api", "request_id": "retry", "settled": "not_happened"},
    ]


async def test_an_owner_frozen_while_its_connection_comes_sends_nothing_when_it_wakes(
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    gateways: list[GatewayProcess],
) -> None:
    """Gateway A claims a key and waits for a connection to the upstream (slow to come: the
    upstream's accept queue is full); A is stopped (SIGSTOP) meanwhile, past its lease. A
    retry on gateway B takes the key over and, on a `release` route, runs it again: the
    client is told 201. The connection A waited for comes while A sleeps. When A wakes it
    must not write the request it holds: the call would run after its client was told it
    ran (and on any route, a lookup's "not happened" would stop being true). A checks its
    lease once the connection is in hand, just before the first byte, not before connecting
    alone."""
    counting, origin = upstream
    counting.release.set()
    route = {"lease": "1s", "timeouts": {"connect": "20s", "total": "20s"}}
    loop = asyncio.get_running_loop()
    with full_listener() as listener:
        port = listener.getsockname()[1]
        slow = GatewayProcess(
            process_config(f"http://127.0.0.1:{port}", redis_url, **route), tmp_path
        )
        other = GatewayProcess(process_config(origin, redis_url, **route), tmp_path)
        gateways += [slow, other]
        await asyncio.gather(asyncio.to_thread(slow.start), asyncio.to_thread(other.start))
        async with aiohttp.ClientSession() as session:
            owner = asyncio.ensure_future(retry(session, slow.url))
            await until(lambda: connecting_to(port), timeout=10)  # claimed, connecting
            slow.signal(signal.SIGSTOP)
            await until(lambda: settled_is_due(redis_url), timeout=10)
            ran = await retry(session, other.url)
            assert ran[0] == 201 and ran[1]["Idempotency-Outcome"] == "rerun", ran
            make_room(listener)  # A's connection comes (its kernel sends the SYN again)
            accepted, _ = await asyncio.wait_for(loop.sock_accept(listener), 20)
            async with relay(accepted, origin):
                slow.signal(signal.SIGCONT)
                late = await asyncio.wait_for(owner, 20)
    assert late[0] == 503 and code(late) == "lease-expired", late
    assert counting.count("/gate") == 1


@asynccontextmanager
async def relay(accepted: socket.socket, origin: str) -> AsyncIterator[None]:
    """Pass the bytes of a connection accepted by hand to `origin` and back, while the block
    runs."""
    host, port = origin.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(sock=accepted)
    up_reader, up_writer = await asyncio.open_connection(host, int(port))

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()

    pipes = [
        asyncio.ensure_future(pipe(reader, up_writer)),
        asyncio.ensure_future(pipe(up_reader, writer)),
    ]
    try:
        yield
    finally:
        for task in pipes:
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)
        writer.close()
        up_writer.close()


# Retries racing on several gateways, reloads under load, and the key changing under a
# waiting retry.


async def test_two_retries_on_two_gateways_race_the_takeover_and_only_one_settles_it(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    one = await make_gateway(on_owner_lost="record")
    two = await make_gateway(on_owner_lost="record")
    await claim_as_dead_owner(redis_url, one)
    await until(lambda: settled_is_due(redis_url), timeout=5)
    answers = await asyncio.gather(*(post(gw) for gw in (one, two, one, two)))
    codes = sorted(code(a) for a in answers)
    assert codes.count("owner-lost") == 1, answers
    assert set(codes) <= {"owner-lost", "in-flight", "outcome-unknown"}, answers
    assert counting.count("/gate") == 0


async def test_an_unsent_key_taken_by_a_gateway_without_mark_sent_is_never_run_twice(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    gateways: list[GatewayProcess],
) -> None:
    """mark_sent on one gateway and not on another (a rolling config change, or a SIGHUP
    that turns it off). A key its owner left unsent is taken by a gateway whose route does
    not mark sends: the claim says UNSENT and leaves the unsent mark, and the gateway
    forwards without clearing it. SIGKILLed while the upstream runs the call, it leaves a
    key that says "never sent": the next retry runs it a second time."""
    counting, origin = upstream
    marking = await make_gateway(mark_sent=True, on_owner_lost="record", lease="1s")
    plain = GatewayProcess(
        process_config(origin, redis_url, on_owner_lost="record", lease="1s"), tmp_path
    )
    gateways.append(plain)
    await asyncio.to_thread(plain.start)
    await claim_as_dead_owner(redis_url, marking, sent=False)  # dies before sending
    async with aiohttp.ClientSession() as session:

        async def runs_it() -> bool:
            async with session.post(f"{plain.url}/gate", data=b"x", headers=KEY) as resp:
                return resp.status != 409

        call = asyncio.ensure_future(until(runs_it, timeout=10, every=0.05))
        await asyncio.wait_for(counting.entered.wait(), 10)
        await asyncio.to_thread(plain.kill)  # after sending, before any answer
        with pytest.raises(aiohttp.ClientError):
            await call
    counting.release.set()
    answer = await settled(marking)
    assert counting.count("/gate") == 1, answer
    assert answer[0] == 502 and code(answer) == "owner-lost"


async def test_a_taker_whose_lease_lapsed_during_the_lookup_does_not_forward(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """The retry on gateway B takes the key over and asks the lookup, which is slow; B loses
    Redis meanwhile (a partition: its renewals go nowhere) and its lease lapses. A retry on
    gateway C takes the key over, the lookup says "not happened", C runs the call. Then B's
    lookup answers "not happened" too, and B forwards: the call runs twice. Nothing checks,
    between the lookup and the send, that the key is still B's (with `mark_sent`, the plain
    path's `sent` mark does; a takeover is never marked)."""
    counting, _ = upstream
    counting.release.set()
    asked = asyncio.Event()
    answer_first = asyncio.Event()
    asks: list[int] = []

    async def find(request: web.Request) -> web.Response:
        asks.append(1)
        if len(asks) == 1:
            asked.set()
            await answer_first.wait()
        return web.json_response({"error": "no such payment"}, status=404)

    async with serving_app(lookup_app(find)) as lookup, proxied(redis_url) as link:
        route = {"on_owner_lost": "record", "lease": "1s", "mark_sent": True}
        rule = {**reconcile(lookup), "timeout": "10s"}
        gw_b = await make_gateway(url=link.url, reconcile=rule, **route)
        gw_c = await make_gateway(reconcile=rule, **route)
        await claim_as_dead_owner(redis_url, gw_c)
        await until(lambda: settled_is_due(redis_url), timeout=5)
        taker = asyncio.ensure_future(post(gw_b))
        await asyncio.wait_for(asked.wait(), 10)
        link.drop = True  # B's renewals go nowhere from here on
        await until(lambda: settled_is_due(redis_url), timeout=5)
        ran = await settled(gw_c)
        assert (ran[0], ran[1].get("Idempotency-Outcome")) == (201, "not-happened")
        answer_first.set()
        try:
            await asyncio.wait_for(taker, 15)
        finally:
            link.drop = False  # B tries to store what it has: fenced by C's record

            def fenced() -> bool:
                return value(metrics_of(gw_b), "idem_fenced_completions_total", route="api") == 1

            if counting.count("/gate") > 1:  # B ran it, and stores its answer meanwhile
                await until(fenced, timeout=10)
    assert counting.count("/gate") == 1


async def test_sighup_flipping_mark_sent_and_on_owner_lost_under_load_runs_each_key_once(
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    gateways: list[GatewayProcess],
) -> None:
    """Duplicated requests on many keys while SIGHUPs flip `mark_sent` and `on_owner_lost`:
    each key runs once, every answer is its 201 or a 409, no 500, no traceback."""
    counting, origin = upstream
    flips = [
        {"mark_sent": False, "on_owner_lost": "keep"},
        {"mark_sent": True, "on_owner_lost": "release"},
        {"mark_sent": False, "on_owner_lost": "record"},
        {"mark_sent": True, "on_owner_lost": "record"},
    ]
    raw = process_config(origin, redis_url, mark_sent=True, on_owner_lost="record")
    raw["log_level"] = "info"
    gateway = GatewayProcess(raw, tmp_path)
    gateways.append(gateway)
    await asyncio.to_thread(gateway.start)
    statuses: list[int] = []
    async with aiohttp.ClientSession() as session:

        async def pay(key: str) -> None:
            headers = {"Idempotency-Key": key}
            async with session.post(f"{gateway.url}/pay", data=b"p", headers=headers) as resp:
                statuses.append(resp.status)
                await resp.read()

        def reloaded(before: int) -> Callable[[], bool]:
            return lambda: gateway.log().count("config reloaded") > before

        for batch in range(8):
            keys = [f"r-{batch}-{i}" for i in range(25)]
            running = asyncio.gather(*(pay(key) for key in keys for _ in range(2)))
            if batch % 2:  # a reload while this batch is in flight
                flip = flips[batch // 2]
                before = gateway.log().count("config reloaded")
                route = {**raw["routes"][0], **flip}
                gateway.config_path.write_text(yaml.safe_dump({**raw, "routes": [route]}))
                gateway.signal(signal.SIGHUP)
                await until(reloaded(before), timeout=10)
            await running
    assert set(statuses) <= {201, 409}, sorted(set(statuses))
    keys = {key for (path, key) in counting.calls if path == "/pay"}
    assert len(keys) == 200 and all(counting.count("/pay", key) == 1 for key in keys)
    assert "Traceback" not in gateway.log()


async def test_a_lost_owners_key_gone_while_the_retry_waits_is_never_run_as_new(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """The key a retry took over goes while it waits for the owner's answer (evicted, purged,
    lost in a failover) and its next ask makes it anew: the call may have run, so the key
    is settled as a lost owner's (record: 502 unknown), never forwarded as a new one."""
    counting, _ = upstream
    counting.release.set()
    gw = await make_gateway(on_owner_lost="record", lease="1s")
    await claim_as_dead_owner(redis_url, gw)
    retried = await retry_taking_over(redis_url, gw)
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(*client.scan_iter())
    finally:
        client.close()
    answer = await retried
    assert answer[0] == 502 and code(answer) == "owner-lost", answer
    assert counting.count("/gate") == 0


async def test_a_record_unreadable_when_the_retry_asks_again_is_never_run_again(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """While a retry waits for a lost owner's answer, the key comes back completed with a
    record it cannot read (another version's, say): 502 record-corrupt, as any retry of a
    corrupt record gets, never a rerun, even on a `release` route."""
    counting, _ = upstream
    counting.release.set()
    gw = await make_gateway(on_owner_lost="release", lease="1s")
    await claim_as_dead_owner(redis_url, gw)
    retried = await retry_taking_over(redis_url, gw)
    client = redis.Redis.from_url(redis_url)
    try:
        [key] = list(client.scan_iter())
        client.hset(key, mapping={"s": "C", "m": "{not a record"})
    finally:
        client.close()
    answer = await retried
    assert answer[0] == 502 and code(answer) == "record-corrupt", answer
    assert counting.count("/gate") == 0
