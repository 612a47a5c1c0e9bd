"""Both record formats through the Lua scripts, against a real redis-server: whatever format
wrote a key, a gateway writing the other finds it under either name, and a value it cannot
read is never taken for a free key."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import orjson
import pytest
import redis
import redis.asyncio
from redis.cluster import key_slot

from gateway.core import layout
from gateway.core.claims import Claim
from gateway.core.compact import Codec, fingerprint_field, pack_answer, stored_ms
from gateway.core.keys import digest, record_names, tenant_id
from gateway.core.record import Record
from gateway.errors import RecordCorrupt
from gateway.http.app import SERVICES
from gateway.store.formats import shipped_codec
from gateway.store.store import Store
from gateway.store.trained import SAMPLES, Trained, dictionary_key
from testkit.polling import until
from testkit.stores import make_store

from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream

Upstream = tuple[CountingUpstream, str]

FP = hashlib.sha256(b"payload").hexdigest()
OTHER_FP = hashlib.sha256(b"another payload").hexdigest()
BODY = b'{"id":"pay_1","amount":100}'
ANSWER = Record(
    201,
    [("Content-Type", "application/json"), ("Set-Cookie", "a"), ("Set-Cookie", "b")],
    len(BODY),
    hashlib.sha256(BODY).hexdigest(),
    completed_at=1_700_000_000.5,
    reason="Created",
)
UNKNOWN = Record(502, [], 0, "", unknown=True, extra={"failure": "owner-lost", "seen": "502"})
# Another claim's answer: the same, but for when it was stored (what tells outcomes apart).
LATER = Record(
    ANSWER.status,
    ANSWER.headers,
    ANSWER.size,
    ANSWER.sha256,
    completed_at=ANSWER.completed_at + 3,
    reason=ANSWER.reason,
)


def names_of(key: str) -> tuple[str, str]:
    return record_names("idem", "api", tenant_id(["tenant"]), digest(key))


@pytest.fixture
async def stores(redis_url: str) -> AsyncIterator[dict[int, Store]]:
    """A Store writing format 1 and one writing format 2, on the same Redis."""
    made = {1: make_store(redis_url), 2: make_store(redis_url)}
    made[2].record_format = 2
    yield made
    for store in made.values():
        await store.close()


async def claim(store: Store, names: tuple[str, str], token: str, fp: str = FP, lease: float = 5):
    first, other = store.ordered(names)
    return await store.claim(first, fp, token, lease, 60.0, other=other)


def same(found: Record | None, wrote: Record) -> bool:
    """The answer as stored: format 2 leaves out an inline body's digest (its CRC covers it)."""
    assert found is not None
    return found == wrote or (found.sha256 == "" and found == _without_digest(wrote))


def _without_digest(record: Record) -> Record:
    return Record(
        record.status,
        record.headers,
        record.size,
        "",
        record.blob,
        record.completed_at,
        record.unknown,
        record.extra,
        record.reason,
    )


@pytest.mark.parametrize("writer, reader", [(1, 2), (2, 1), (1, 1), (2, 2)])
async def test_a_record_either_format_wrote_replays_in_the_other(
    stores: dict[int, Store], writer: int, reader: int
) -> None:
    names = names_of(f"k-{writer}-{reader}")
    owned = await claim(stores[writer], names, "owner")
    assert owned.outcome is Claim.CLAIMED and owned.key == names[writer - 1]
    assert await stores[writer].complete(owned.key, "owner", FP, ANSWER, BODY, 60)
    found = await claim(stores[reader], names, "retry")
    assert found.outcome is Claim.DONE and found.key == names[writer - 1]
    assert same(found.record, ANSWER) and found.body == BODY
    assert (await claim(stores[reader], names, "x", OTHER_FP)).outcome is Claim.MISMATCH


@pytest.mark.parametrize("writer, reader", [(1, 2), (2, 1)])
async def test_a_claim_held_in_one_format_is_in_flight_for_the_other(
    stores: dict[int, Store], writer: int, reader: int
) -> None:
    names = names_of(f"busy-{writer}")
    assert (await claim(stores[writer], names, "owner")).outcome is Claim.CLAIMED
    busy = await claim(stores[reader], names, "dup")
    assert busy.outcome is Claim.IN_FLIGHT and busy.key == names[writer - 1]
    assert (await claim(stores[reader], names, "x", OTHER_FP)).outcome is Claim.MISMATCH


async def test_format_2_settles_a_claim_into_one_string_in_the_slot_of_format_1s_name(
    stores: dict[int, Store], redis_url: str
) -> None:
    names = names_of("short")
    owned = await claim(stores[2], names, "owner")
    assert owned.key == names[1]
    assert await stores[2].complete(owned.key, "owner", FP, ANSWER, BODY, 60)
    plain = redis.Redis.from_url(redis_url)
    try:
        assert plain.type(names[1]) == b"string" and not plain.exists(names[0])
        assert plain.pttl(names[1]) > 59_000
        assert (len(names[1]), len(names[0])) == (36, 76)  # route "api"
    finally:
        plain.close()
    for n in range(200):
        legacy, short = names_of(f"slot-{n}")
        assert key_slot(legacy.encode()) == key_slot(short.encode())


@pytest.mark.parametrize("owner, taker", [(1, 2), (2, 1)])
async def test_a_lost_owner_of_one_format_is_taken_over_by_the_other_and_its_answer_wins(
    stores: dict[int, Store], owner: int, taker: int, redis_url: str
) -> None:
    """The owner stalls past its lease; a gateway writing the other format takes the key over
    and records the unknown outcome; the owner's answer, come late, replaces it."""
    names = names_of(f"lost-{owner}")
    first = await stores[owner].claim(*_at(stores[owner], names), FP, "owner", 0.05, 60.0)
    assert first.outcome is Claim.CLAIMED
    plain = redis.Redis.from_url(redis_url)
    try:
        plain.hset(first.key, "l", 0)  # the lease ended long ago (its owner stalled)
    finally:
        plain.close()
    taken = await claim(stores[taker], names, "taker")
    assert taken.outcome is Claim.TAKEN and taken.key == first.key
    assert await stores[taker].complete(taken.key, "taker", FP, UNKNOWN, b"", 60, taken.lost)
    unknown = await claim(stores[owner], names, "retry")
    assert unknown.outcome is Claim.DONE and unknown.record is not None
    assert unknown.record.unknown
    assert await stores[owner].complete(first.key, "owner", FP, ANSWER, BODY, 60), "fenced"
    done = await claim(stores[taker], names, "retry")
    assert same(done.record, ANSWER) and done.body == BODY
    assert not await stores[taker].complete(first.key, "taker", FP, LATER, BODY, 60)


def _at(store: Store, names: tuple[str, str]) -> tuple[str]:
    return (store.ordered(names)[0],)


async def test_a_settled_format_2_record_is_no_claim_to_renew_release_or_mark(
    stores: dict[int, Store],
) -> None:
    names = names_of("settled")
    owned = await claim(stores[2], names, "owner")
    assert await stores[2].complete(owned.key, "owner", FP, ANSWER, BODY, 60)
    for store in stores.values():
        assert not await store.extend(owned.key, "owner", 5)
        assert not await store.release(owned.key, "owner")
        assert not await store.sent(owned.key, "owner")
        assert await store.complete(owned.key, "owner", FP, ANSWER, BODY, 60), "its own, again"
        assert not await store.complete(owned.key, "thief", FP, LATER, BODY, 60)
    assert same((await claim(stores[1], names, "retry")).record, ANSWER)


async def test_an_operator_resolution_keeps_the_records_format_and_fingerprint(
    stores: dict[int, Store], redis_url: str
) -> None:
    names = names_of("resolved")
    owned = await claim(stores[2], names, "owner")
    assert await stores[2].complete(owned.key, "owner", FP, UNKNOWN, b"", 60)
    operator = Record(200, [("Content-Type", "text/plain")], 2, "", extra={"resolved": "op"})
    assert await stores[1].resolve(owned.key, operator, b"ok", 60)
    plain = redis.Redis.from_url(redis_url)
    try:
        assert plain.type(owned.key) == b"string"
    finally:
        plain.close()
    done = await claim(stores[1], names, "retry")
    assert done.outcome is Claim.DONE and same(done.record, operator) and done.body == b"ok"
    assert (await claim(stores[2], names, "retry", OTHER_FP)).outcome is Claim.MISMATCH
    assert not await stores[2].complete(owned.key, "owner", FP, ANSWER, BODY, 60), "fenced"
    assert not await stores[2].resolve(owned.key, operator, b"ok", 60), "not unknown any more"


def _damaged(value: bytes) -> dict[str, bytes]:
    answer_at = layout.IDENTITY  # a completed outcome's: past the kind, fingerprint and time
    flipped = bytearray(value)
    flipped[-10] ^= 1
    dictionary = bytearray(value)
    dictionary[answer_at] = 250
    return {
        "truncated": value[: len(value) - 5],
        "cut-short": value[:2],
        "flipped-byte": bytes(flipped),
        "unknown-dictionary": bytes(dictionary),
        "unknown-version": b"\x09" + value[1:],
        "unknown-state": b"\x05" + value[1:],
        "fingerprint": value[:5] + bytes((value[5] ^ 1,)) + value[6:],
    }


DAMAGE = [
    "truncated",
    "cut-short",
    "flipped-byte",
    "unknown-dictionary",
    "unknown-version",
    "fingerprint",
]
# Damage done by hand to a hash (a claim, or a format-1 record), its fingerprint kept: a
# PENDING state with a lease end that is no number (a word, or what strtod reads as a float
# that is none), or the state field deleted.
LEASE_ENDS = {"lease-end": "soon", "lease-end-nan": "nan", "lease-end-inf": "-inf"}
HASH_DAMAGE = [*LEASE_ENDS, "state"]


@pytest.mark.parametrize("damage", [*DAMAGE, "unknown-state"])
async def test_a_format_2_value_that_cannot_be_read_is_corrupt_never_a_free_key(
    stores: dict[int, Store], redis_url: str, damage: str
) -> None:
    names = names_of(f"damaged-{damage}")
    owned = await claim(stores[2], names, "owner")
    assert await stores[2].complete(owned.key, "owner", FP, ANSWER, BODY, 60)
    plain = redis.Redis.from_url(redis_url)
    try:
        plain.set(owned.key, _damaged(plain.get(owned.key) or b"")[damage], px=60_000)
        for store in stores.values():
            with pytest.raises(RecordCorrupt):
                await claim(store, names, "retry")
        assert plain.type(owned.key) == b"string", "nothing written over it"
    finally:
        plain.close()


async def test_a_key_of_another_type_is_corrupt_never_a_free_key(
    stores: dict[int, Store], redis_url: str
) -> None:
    names = names_of("a-list")
    plain = redis.Redis.from_url(redis_url)
    try:
        plain.rpush(names[1], "not", "a", "record")
        for store in stores.values():
            with pytest.raises(RecordCorrupt):
                await claim(store, names, "retry")
        assert plain.llen(names[1]) == 3
    finally:
        plain.close()


@pytest.mark.parametrize("writer", [1, 2])
@pytest.mark.parametrize("damage", HASH_DAMAGE)
async def test_a_claim_damaged_by_hand_is_corrupt_never_a_free_key(
    stores: dict[int, Store], redis_url: str, writer: int, damage: str
) -> None:
    """A PENDING hash edited by hand, its lease end no number or its state gone: the claim
    cannot tell whether its owner lives, so it is record-corrupt, as a value that cannot be
    read is; an operator's result is not stored over it either (its lease is not known to
    be over)."""
    names = names_of(f"damaged-{damage}-{writer}")
    owned = await claim(stores[writer], names, "owner")
    plain = redis.Redis.from_url(redis_url)
    try:
        if damage == "state":
            plain.hdel(owned.key, "s")
        else:
            plain.hset(owned.key, "l", LEASE_ENDS[damage])
        left = plain.hgetall(owned.key)
        for store in stores.values():
            with pytest.raises(RecordCorrupt):
                await claim(store, names, "retry")
            assert not await store.resolve(owned.key, ANSWER, BODY, 60)
        assert plain.hgetall(owned.key) == left
    finally:
        plain.close()


async def test_operators_read_either_format(stores: dict[int, Store]) -> None:
    for writer in (1, 2):
        names = names_of(f"inspected-{writer}")
        owned = await claim(stores[writer], names, "owner")
        pending = await stores[3 - writer].inspect(*names)
        assert pending.state == "P" and pending.key == owned.key and pending.record is None
        assert await stores[writer].complete(owned.key, "owner", FP, ANSWER, BODY, 60)
        stored = await stores[3 - writer].inspect(*names)
        assert stored.key == owned.key and stored.state == "C" and stored.format == writer
        assert same(stored.record, ANSWER) and stored.body == BODY
        assert await stores[1].purge(*names)
        assert (await stores[2].inspect(*names)).key is None


def test_format_2s_fingerprint_is_what_the_claim_compares() -> None:
    codec = shipped_codec()
    value = codec.pack("C", fingerprint_field(FP), pack_answer(ANSWER, BODY), stored_ms(ANSWER))
    assert value[1:9] == bytes.fromhex(FP)[:8]


@pytest.mark.parametrize("fail_mode", ["closed", "open"])
@pytest.mark.parametrize("damage", [*DAMAGE, *HASH_DAMAGE])
async def test_a_damaged_record_answers_record_corrupt_and_never_runs_again(
    make_gateway: GatewayFactory, upstream: Upstream, redis_url: str, damage: str, fail_mode: str
) -> None:
    """Never forwarded, on a route that fails open too: a record that cannot be read is no
    Redis failure."""
    counting, origin = upstream
    written = 1 if damage in HASH_DAMAGE else 2
    settings = gateway_settings(origin, redis={"record_format": written}, fail_mode=fail_mode)
    client = await make_gateway(settings)
    headers = {"Idempotency-Key": f"damaged-{damage}"}
    assert (await client.post("/pay", data=b"x", headers=headers)).status == 201
    names = record_names("idem", "api", tenant_id([""]), digest(headers["Idempotency-Key"]))
    plain = redis.Redis.from_url(redis_url)
    try:
        if damage == "state":
            plain.hdel(names[0], "s")
        elif damage in LEASE_ENDS:
            plain.hset(names[0], mapping={"s": "P", "t": "lost", "l": LEASE_ENDS[damage]})
            plain.hdel(names[0], "m", "b")
        else:
            plain.set(names[1], _damaged(plain.get(names[1]) or b"")[damage], px=60_000)
    finally:
        plain.close()
    for _ in range(2):
        answer = await client.post("/pay", data=b"x", headers=headers)
        assert answer.status == 502, await answer.read()
        assert orjson.loads(await answer.read())["code"] == "record-corrupt"
    assert counting.count("/pay") == 1


def answer_of(n: int) -> tuple[Record, bytes]:
    """The n-th answer of a payments-like route: the same shape, its own ids."""
    body = b'{"id":"pay_%06d","amount":%d,"currency":"EUR","status":"captured"}' % (n, n * 7)
    headers = [
        ("Content-Type", "application/json; charset=utf-8"),
        ("Location", f"/v1/payments/pay_{n:06d}"),
        ("X-Request-Id", hashlib.md5(str(n).encode()).hexdigest()),
    ]
    return Record(201, headers, len(body), "", completed_at=1_700_000_000.0 + n), body


async def settle(store: Store, key: str, n: int) -> str:
    """Claim and complete the n-th answer under `key`: the name it is held under."""
    owned = await claim(store, names_of(key), f"owner-{n}")
    record, body = answer_of(n)
    assert await store.complete(owned.key, f"owner-{n}", FP, record, body, 60)
    return owned.key


async def trained(store: Store, route: str = "api") -> None:
    await until(lambda: store.trained.writer(route, 60) is not None, timeout=30)


def unreachable(store: Store) -> Trained:
    """`store`'s dictionaries, read from a Redis that is not there."""
    away = redis.asyncio.Redis(port=9, socket_connect_timeout=0.2)
    return Trained(away, "idem", store._keep_dictionary, lambda: store.failures)


async def test_a_route_trains_its_own_dictionary_and_every_gateway_reads_with_it(
    stores: dict[int, Store], redis_url: str
) -> None:
    writer = stores[2]
    for n in range(SAMPLES):
        await settle(writer, f"train-{n}", n)
    await trained(writer)
    own = writer.trained.writer("api", 60)
    assert own is not None
    plain = redis.Redis.from_url(redis_url)
    try:
        assert plain.exists(dictionary_key("idem", "api", own.number))
        assert plain.get(dictionary_key("idem", "api")) == f"{own.number & 0x7FFF:04x}".encode()
        name = await settle(writer, "after", 10_000)
        value = plain.get(name) or b""
        needs = Codec.needs(value)
        assert needs is not None and needs.number == own.number, "compressed with the route's own"
        record, body = answer_of(10_000)
        shipped = shipped_codec().pack("C", bytes(8), pack_answer(record, body), stored_ms(record))
        assert len(value) < len(shipped)
    finally:
        plain.close()
    reader = make_store(redis_url)  # a gateway that has not seen it: read from Redis
    try:
        found = await claim(reader, names_of("after"), "retry")
        assert found.outcome is Claim.DONE and found.body == answer_of(10_000)[1]
        assert stores[1].trained.writer("api", 60) is None
        assert (await claim(stores[1], names_of("after"), "retry")).body == answer_of(10_000)[1]
    finally:
        await reader.close()


async def test_gateways_training_at_once_settle_on_one_dictionary(redis_url: str) -> None:
    """Each stores its own (every record stays readable), then follows the route's pointer to
    the newest, which both write with from then on."""
    first, second = make_store(redis_url), make_store(redis_url)
    try:
        for store in (first, second):
            store.record_format = 2
            store.trained.refresh = 0.1
        for n in range(SAMPLES):
            await settle(first, f"one-{n}", n)
            await settle(second, f"two-{n}", n + 500)
        await trained(first)
        await trained(second)
        for store in (first, second):
            store.trained.start()

        def agreed() -> bool:
            one, two = first.trained.writer("api", 60), second.trained.writer("api", 60)
            return one is not None and two is not None and one.number == two.number

        await until(agreed, timeout=30)
        for n in (0, SAMPLES - 1):
            for store, key in ((second, f"one-{n}"), (first, f"two-{n}")):
                assert (await claim(store, names_of(key), "retry")).outcome is Claim.DONE
    finally:
        await first.close()
        await second.close()


async def test_a_records_dictionary_nobody_knows_is_corrupt_and_redis_down_not_yet(
    stores: dict[int, Store], redis_url: str
) -> None:
    for n in range(SAMPLES):
        await settle(stores[2], f"gone-{n}", n)
    await trained(stores[2])
    own = stores[2].trained.writer("api", 60)
    assert own is not None
    await settle(stores[2], "needs-it", 20_000)
    away = make_store(redis_url)
    away.trained = unreachable(away)
    plain = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(RecordCorrupt) as down:
            await claim(away, names_of("needs-it"), "retry")
        assert down.value.transient
        await stores[2].trained.close()  # the one gateway that knows it stops keeping it
        plain.delete(dictionary_key("idem", "api", own.number))
        fresh = make_store(redis_url)
        try:
            with pytest.raises(RecordCorrupt) as gone:
                await claim(fresh, names_of("needs-it"), "retry")
            assert not gone.value.transient
        finally:
            await fresh.close()
    finally:
        plain.close()
        await away.close()


async def test_a_record_whose_dictionary_cannot_be_read_now_is_503_never_forwarded(
    make_gateway: GatewayFactory, upstream: Upstream
) -> None:
    """Even on a route that fails open: the record is there, only its dictionary was not."""
    counting, origin = upstream
    settings = gateway_settings(origin, redis={"record_format": 2}, fail_mode="open")
    client = await make_gateway(settings)
    store = client.server.app[SERVICES].store
    for n in range(SAMPLES):
        headers = {"Idempotency-Key": f"many-{n}"}
        assert (await client.post("/pay", data=b"x", headers=headers)).status == 201
    await trained(store)
    headers = {"Idempotency-Key": "with-its-own"}
    assert (await client.post("/pay", data=b"x", headers=headers)).status == 201
    await store.trained.close()
    store.trained = unreachable(store)
    answer = await client.post("/pay", data=b"x", headers=headers)
    assert answer.status == 503 and answer.headers["Retry-After"]
    assert orjson.loads(await answer.read())["code"] == "store-unavailable"
    assert counting.count("/pay") == SAMPLES + 1
