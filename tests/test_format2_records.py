"""Values of record format 2 written by release 0007fac (layout V2) replay byte for byte until
their retention ends: each value of tests/format2/values.json, written by that release's own
code (tests/format2/make_fixtures.py), is stored in Redis under its name as that release left
it (with its route's trained dictionary in the hash that release kept it in, where it needs
one), then retried through today's gateway over a raw socket, which must answer from it with
the recorded status line, the recorded header lines in order with their bytes and repeats,
the body, and only the additions docs/fidelity.md lists; the upstream never called."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis

from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.core import layout
from gateway.core.fingerprint import fingerprint
from gateway.core.keys import digest, record_names, tenant_id
from gateway.store.trained import v2_dictionaries_key

from .loopback import serving
from .rawhttp import exchange

VALUES = Path(__file__).parent / "format2" / "values.json"
DOCUMENT = json.loads(VALUES.read_text(encoding="utf-8"))
PREFIX: str = DOCUMENT["prefix"]
RETENTION = DOCUMENT["retention_ms"] / 1000
# A route's own dictionaries as the release kept them: route -> field -> bytes.
DICTIONARIES = {
    route: {number: bytes.fromhex(data) for number, data in fields.items()}
    for route, fields in DOCUMENT["dictionaries"].items()
}


@dataclass(frozen=True)
class Fixture:
    """One value of the release and the retry it answers (values.json's fields)."""

    name: str
    route: str
    scope: str | None
    key: str
    method: str
    path: str
    query: str
    body: bytes
    fingerprint: str
    record_name: str
    codec: int
    value: bytes
    replay: dict[str, Any]

    @classmethod
    def load(cls, entry: dict[str, Any]) -> Fixture:
        request = entry["request"]
        return cls(
            entry["name"],
            entry["route"],
            entry["scope"],
            entry["key"],
            request["method"],
            request["path"],
            request["query"],
            bytes.fromhex(request["body_hex"]),
            entry["fingerprint"],
            entry["record_name"],
            entry["codec"],
            bytes.fromhex(entry["value_hex"]),
            entry["replay"],
        )

    @property
    def trained(self) -> bool:
        """Compressed with its route's own dictionary (0007fac's codec 128 and up)."""
        return self.codec >= 128

    def retry(self) -> bytes:
        """The client's retry: the same key, scope and request as the one recorded."""
        target = self.path + (f"?{self.query}" if self.query else "")
        scope = f"Authorization: {self.scope}\r\n" if self.scope is not None else ""
        return (
            f"{self.method} {target} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
            f"Idempotency-Key: {self.key}\r\n{scope}Content-Type: application/json\r\n"
            f"Content-Length: {len(self.body)}\r\n\r\n"
        ).encode() + self.body


FIXTURES = {entry["name"]: Fixture.load(entry) for entry in DOCUMENT["fixtures"]}
ANSWERS = [name for name, fixture in FIXTURES.items() if fixture.replay["kind"] == "answer"]
PROBLEMS = [name for name, fixture in FIXTURES.items() if fixture.replay["kind"] == "problem"]
TRAINED = [name for name, fixture in FIXTURES.items() if fixture.trained]

GatewayFactory = Callable[..., Awaitable[TestClient]]
# The upstream: the requests it was sent (their heads), and its origin.
Upstream = tuple[list[bytes], str]


@pytest.fixture
async def upstream_seen() -> AsyncIterator[Upstream]:
    """An upstream on loopback that keeps the head of every request sent to it, whatever its
    path, and answers each 500: a replay must send it none."""
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        try:
            seen.append(await reader.readuntil(b"\r\n\r\n"))
        except asyncio.IncompleteReadError:
            return  # a connection that sent no request
        writer.write(b"HTTP/1.1 500 Ran\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()

    async with serving(handle) as port:
        yield seen, f"http://127.0.0.1:{port}"


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    """A client of the test's Redis (emptied for it by `redis_url`)."""
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(params=[1, 2], ids=lambda f: f"writes-{f}")
def record_format(request: pytest.FixtureRequest) -> int:
    """The format the replaying gateway writes: it reads the release's values either way."""
    return int(request.param)


def settings_for(fixture: Fixture, origin: str, blobs: Path, record_format: int) -> Settings:
    """The fixture's route over every path of `origin`, as the release's defaults have it
    (key prefix `idem`, scope `Authorization`, fingerprint over the body, a day's
    retention), records written in `record_format`."""
    return settings_from_dict(
        {
            "upstream": origin,
            "redis": {"breaker": {"failures": 1000}, "record_format": record_format},
            "blob": {"url": f"file://{blobs}"},
            "routes": [{"name": fixture.route, "path_prefix": "/", "upstream": origin}],
        }
    )


async def store(client: Redis, fixture: Fixture, value: bytes | None = None) -> None:
    """The fixture's value (or `value` in its place) under its name, kept for the retention,
    and its route's dictionaries in the release's hash where the value needs one."""
    await client.set(fixture.record_name, fixture.value if value is None else value, px=86400_000)
    if fixture.trained:
        key = v2_dictionaries_key(PREFIX, fixture.route)
        await client.hset(key, mapping=DICTIONARIES[fixture.route])


def split(reply: bytes) -> tuple[list[bytes], bytes]:
    """An answer read to the connection's end: its head's lines, and every byte after it."""
    head, sep, rest = reply.partition(b"\r\n\r\n")
    assert sep, f"no complete head in {reply[:300]!r}"
    return head.split(b"\r\n"), rest


def name_of(line: bytes) -> bytes:
    return line.partition(b":")[0].lower()


def value_of(lines: list[bytes], name: bytes) -> bytes:
    [value] = [line.partition(b":")[2].strip() for line in lines if name_of(line) == name]
    return value


# What a replay adds to the recorded lines (docs/fidelity.md), by name.
ALWAYS_ADDED = {b"idempotent-replayed", b"idempotency-expires", b"x-request-id", b"connection"}
# Left out of replays in the anonymous scope (`replay_set_cookie`, `replay_credentials`).
SCOPED_ONLY = {
    *(b"set-cookie", b"authorization", b"www-authenticate"),
    *(b"proxy-authenticate", b"authentication-info"),
}


def recorded_lines(fixture: Fixture) -> list[bytes]:
    """The recorded header lines a retry of `fixture` gets, as bytes: the text of the
    release's headers is one character a byte."""
    lines = [f"{n}: {v}".encode("latin-1") for n, v in fixture.replay["headers"]]
    if fixture.scope is None:
        lines = [line for line in lines if name_of(line) not in SCOPED_ONLY]
    return lines


def added_names(fixture: Fixture) -> set[bytes]:
    """The names a replay adds: the marker, the expiry, the request id and its own
    Connection always; Date when none was recorded; Content-Length when none was recorded
    (a 204 has none)."""
    recorded = {name.lower().encode("latin-1") for name, _ in fixture.replay["headers"]}
    added = set(ALWAYS_ADDED)
    if b"date" not in recorded:
        added.add(b"date")
    if fixture.replay["status"] != 204 and b"content-length" not in recorded:
        added.add(b"content-length")
    return added


def check_replay(fixture: Fixture, reply: bytes) -> None:
    """The reply is the recorded answer: its status line, its lines in order as bytes, its
    body, and exactly the documented additions."""
    expected = fixture.replay
    body = bytes.fromhex(expected["body_hex"])
    lines, rest = split(reply)
    reason = expected["reason"].encode("latin-1")
    assert lines[0] == b"HTTP/1.1 %d %s" % (expected["status"], reason)
    added = added_names(fixture)
    own = [line for line in lines[1:] if name_of(line) in added]
    recorded = [line for line in lines[1:] if name_of(line) not in added]
    assert recorded == recorded_lines(fixture)
    assert sorted(name_of(line) for line in own) == sorted(added)
    assert value_of(own, b"idempotent-replayed") == b"true"
    assert value_of(own, b"connection") == b"close"
    assert value_of(own, b"x-request-id")
    check_expires(own)
    if b"content-length" in added:
        assert value_of(own, b"content-length") == str(len(body)).encode()
    assert rest == body  # and nothing after it: the connection closed


def check_expires(lines: list[bytes]) -> None:
    """`Idempotency-Expires` says the record is kept a day more (the value's TTL)."""
    expires = parsedate_to_datetime(value_of(lines, b"idempotency-expires").decode()).timestamp()
    assert time.time() + RETENTION - 60 < expires <= time.time() + RETENTION + 1


def check_problem(reply: bytes, code: str) -> list[bytes]:
    """A 502 problem+json of `code`: its head's lines."""
    lines, rest = split(reply)
    assert lines[0] == b"HTTP/1.1 502 Bad Gateway"
    assert value_of(lines, b"content-type") == b"application/problem+json"
    assert orjson.loads(rest)["code"] == code
    return lines


def test_the_values_are_the_releases_v2_values_of_the_codecs_they_name() -> None:
    """The data file holds what it says: each value in layout V2, its codec byte the one the
    fixture names, an UNKNOWN outcome with its lost owner's token, and every kind of value
    the release wrote among them."""
    states = set()
    for fixture in FIXTURES.values():
        found = layout.fields(fixture.value)
        assert fixture.value[0] == layout.V2 and found is not None, fixture.name
        assert fixture.value[found.codec_at] == fixture.codec, fixture.name
        assert bool(found.lost) == (found.state == "U"), fixture.name
        states.add(found.state)
    assert states == {"C", "U"}
    codecs = {fixture.codec for fixture in FIXTURES.values()}
    assert {0, 1, 128} <= codecs  # raw, the shipped dictionary, a route's own


@pytest.mark.parametrize("name", FIXTURES)
def test_the_retry_is_named_and_fingerprinted_as_the_release_stored_it(
    name: str, tmp_path: Path
) -> None:
    """Today's gateway looks for the value under the name the release gave it, with the
    fingerprint the release stored (else the retry would run as new, or answer 422)."""
    fixture = FIXTURES[name]
    settings = settings_for(fixture, "http://127.0.0.1:9", tmp_path, 2)
    scope = tenant_id([fixture.scope])
    assert record_names(PREFIX, fixture.route, scope, digest(fixture.key))[1] == fixture.record_name
    spec = settings.routes[0].fingerprint
    found = fingerprint(spec, fixture.method, fixture.path, fixture.query, {}, fixture.body)
    assert found == fixture.fingerprint


@pytest.mark.parametrize("name", ANSWERS)
async def test_a_0007fac_value_replays_byte_for_byte(
    name: str,
    redis_client: Redis,
    redis_url: str,
    make_gateway: GatewayFactory,
    record_format: int,
    upstream_seen: Upstream,
    tmp_path: Path,
) -> None:
    fixture = FIXTURES[name]
    seen, origin = upstream_seen
    await store(redis_client, fixture)
    settings = settings_for(fixture, origin, tmp_path / "blobs", record_format)
    client = await make_gateway(settings=settings, url=redis_url)
    for _ in range(2):  # the first replay changes nothing the second is answered from
        check_replay(fixture, await exchange(client.port, fixture.retry()))
    assert seen == [], "the retry reached the upstream"
    assert await redis_client.get(fixture.record_name) == fixture.value


@pytest.mark.parametrize("name", PROBLEMS)
async def test_a_0007fac_value_that_holds_no_answer_answers_its_problem(
    name: str,
    redis_client: Redis,
    redis_url: str,
    make_gateway: GatewayFactory,
    record_format: int,
    upstream_seen: Upstream,
    tmp_path: Path,
) -> None:
    """An UNKNOWN outcome answers 502 outcome-unknown (`Idempotency-Outcome: unknown`); an
    answer whose body was too large to record, 502 body-not-recorded: both marked as
    replays, and neither run again."""
    fixture = FIXTURES[name]
    seen, origin = upstream_seen
    await store(redis_client, fixture)
    settings = settings_for(fixture, origin, tmp_path / "blobs", record_format)
    client = await make_gateway(settings=settings, url=redis_url)
    for _ in range(2):
        lines = check_problem(await exchange(client.port, fixture.retry()), fixture.replay["code"])
        assert value_of(lines, b"idempotent-replayed") == b"true"
        if fixture.replay["code"] == "outcome-unknown":
            assert value_of(lines, b"idempotency-outcome") == b"unknown"
            check_expires(lines)
    assert seen == [], "the retry reached the upstream"
    assert await redis_client.get(fixture.record_name) == fixture.value


def _damaged(value: bytes) -> dict[str, bytes]:
    """`value` with one byte changed, at each place a V2 value has: its version, its state,
    its codec byte, the middle of its answer, the last byte of its checksum."""
    found = layout.fields(value)
    assert found is not None
    places = {
        "version": 0,
        "state": 1,
        "codec": found.codec_at,
        "answer": (found.codec_at + 1 + len(value) - 4) // 2,
        "checksum": len(value) - 1,
    }
    return {
        place: value[:at] + bytes((value[at] ^ 0x01,)) + value[at + 1 :]
        for place, at in places.items()
    }


DAMAGES = [
    pytest.param(name, place, id=f"{name}-{place}")
    for name, fixture in FIXTURES.items()
    for place in _damaged(fixture.value)
]


@pytest.mark.parametrize(("name", "place"), DAMAGES)
async def test_a_0007fac_value_damaged_in_one_byte_answers_record_corrupt_and_never_runs(
    name: str,
    place: str,
    redis_client: Redis,
    redis_url: str,
    make_gateway: GatewayFactory,
    record_format: int,
    upstream_seen: Upstream,
    tmp_path: Path,
) -> None:
    fixture = FIXTURES[name]
    seen, origin = upstream_seen
    damaged = _damaged(fixture.value)[place]
    await store(redis_client, fixture, damaged)
    settings = settings_for(fixture, origin, tmp_path / "blobs", record_format)
    client = await make_gateway(settings=settings, url=redis_url)
    for _ in range(2):
        check_problem(await exchange(client.port, fixture.retry()), "record-corrupt")
    assert seen == [], "a damaged value let the request run"
    assert await redis_client.get(fixture.record_name) == damaged


@pytest.mark.parametrize("name", TRAINED)
async def test_a_0007fac_value_is_read_with_its_routes_dictionary_from_the_releases_hash(
    name: str,
    redis_client: Redis,
    redis_url: str,
    make_gateway: GatewayFactory,
    record_format: int,
    upstream_seen: Upstream,
    tmp_path: Path,
) -> None:
    """The value names its route's dictionary by number, which the release kept in the hash
    `prefix:dictionaries:route`: without it there, the value cannot be read, and answers
    record-corrupt (never runs); put back, it replays."""
    fixture = FIXTURES[name]
    seen, origin = upstream_seen
    await store(redis_client, fixture)
    await redis_client.delete(v2_dictionaries_key(PREFIX, fixture.route))
    settings = settings_for(fixture, origin, tmp_path / "blobs", record_format)
    client = await make_gateway(settings=settings, url=redis_url)
    check_problem(await exchange(client.port, fixture.retry()), "record-corrupt")
    await store(redis_client, fixture)
    check_replay(fixture, await exchange(client.port, fixture.retry()))
    assert seen == [], "the retry reached the upstream"
