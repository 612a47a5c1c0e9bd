"""Writes values.json beside it: record format 2's values as release 0007fac wrote them
(layout V2), for tests/test_format2_records.py to replay through today's gateway.

Run by hand against that release's own code, never today's (README.md says how):

    mkdir /tmp/r0007fac && git archive 0007fac gateway lua | tar -x -C /tmp/r0007fac
    PYTHONPATH=/tmp/r0007fac python tests/format2/make_fixtures.py

Each answer is packed and compressed by the release's `core.compact` (its `Codec` from
`store.formats`, with the dictionary it ships, or with a route's dictionary trained as its
`store.trained` trains one), named by its `core.keys.record_names`, and stored by its own
`claim.lua` and `complete.lua` in a redis-server started here: the value kept is what Redis
then holds. Before anything is written, every module and script used is checked against the
release's blobs in git, so that a tree of another release cannot pass for it.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import redis
import zstandard

RELEASE: Final = "0007fac"

try:  # the release's modules, from the tree PYTHONPATH names
    from gateway.core.compact import OWN, RAW, Codec, Dictionary, fingerprint_field, pack_answer
    from gateway.core.fingerprint import fingerprint
    from gateway.core.keys import URL_SAFE, digest, record_names, tenant_id
    from gateway.core.record import STATE_COMPLETED, STATE_UNKNOWN, Record
    from gateway.store.formats import shipped_codec
except ImportError as missing:
    raise SystemExit(
        f"this is not release {RELEASE}'s gateway ({missing}): set PYTHONPATH to its tree"
    ) from None

HERE: Final = Path(__file__).resolve().parent
OUT: Final = HERE / "values.json"
TREE: Final = Path(sys.modules["gateway"].__file__ or "").resolve().parent.parent
PREFIX: Final = "idem"  # the release's default `redis.key_prefix`
BEARER: Final = "Bearer tenant-1"  # the routes' scope (Authorization), where one is sent
RETENTION_MS: Final = 86_400_000  # the routes' default: a day
# The release's `store.trained`: answers a route's dictionary is trained on, the bytes kept
# of each, the dictionary's size.
SAMPLES: Final = 200
SAMPLE_MAX: Final = 4096
SIZE: Final = 8192
STORED_AT: Final = 1_795_860_000.0  # Sat, 28 Nov 2026 10:00:00 GMT, when the answers came


@dataclass(frozen=True)
class BodySpec:
    """The routes' fingerprint: the release's default (`fingerprint: {mode: body}`)."""

    mode: str = "body"
    headers: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fixture:
    """One recorded answer and the request it answered."""

    name: str
    about: str
    route: str
    scope: str | None  # the Authorization the request carried; None: the anonymous scope
    key: str
    method: str
    path: str
    query: str
    body: bytes
    record: Record
    inline: bytes  # the body kept in the value (b"": none kept)
    codec: int | None  # the codec byte the release must have chosen (None: its own choice)
    replay: dict[str, Any]  # what a retry must get, when it is no byte-for-byte answer
    lost_owner: bool = False  # written as a taker of a lost owner's key writes it
    dictionary: bytes | None = None  # the route's own (codec OWN)


def _date(at: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(at))


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _answer(
    status: int, reason: str | None, headers: list[tuple[str, str]], body: bytes, at: float
) -> Record:
    return Record(
        status=status,
        headers=headers,
        size=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        completed_at=at,
        reason=reason,
    )


PAYMENT: Final = _json(
    {
        "id": "pay_7Qx2Lm9",
        "object": "payment",
        "amount": 4200,
        "currency": "EUR",
        "status": "captured",
        "customer": {"id": "cus_8812", "email": "ana@example.com", "name": "Ana Mu\u00f1oz"},
        "method": {"type": "card", "brand": "visa", "last4": "4242", "exp": "12/29"},
        "created": "2026-11-28T10:00:00Z",
        "metadata": {"order": "ord_5531", "channel": "web"},
    }
)
TYPICAL: Final = [
    ("Content-Type", "application/json; charset=utf-8"),
    ("Content-Length", str(len(PAYMENT))),
    ("Date", _date(STORED_AT)),
    ("Server", "legacy-erp/4.2"),
    ("Location", "/payments/pay_7Qx2Lm9"),
    ("Set-Cookie", "session=a1b2c3; Path=/; HttpOnly; Secure"),
    ("X-Trace", "1"),
    ("Set-Cookie", "theme=dark; Path=/"),
    ("X-Merchant", "Caf\xe9 M\xfcller"),  # Latin-1 bytes, replayed as they came
    ("set-cookie", "lang=fr"),
    ("x-trace", "2"),
    ("Cache-Control", "no-store"),
    ("ETag", '"pay-7Qx2Lm9-v1"'),
    ("X-RateLimit-Remaining", "97"),
]
REFUND: Final = _json({"id": "re_31", "payment": "pay_7Qx2Lm9", "amount": 1200, "status": "ok"})
NOISE: Final = hashlib.shake_256(b"idem-gateway format 2 raw").digest(2048)  # incompressible
TOO_LARGE: Final = 101 << 20  # over the default max_recorded_body (100 MiB)
REPORT_SHA256: Final = hashlib.sha256(bytes(range(256)) * (TOO_LARGE // 256)).hexdigest()


def _order(number: int, at: float) -> tuple[Record, bytes]:
    """An answer of route `orders`, the number-th of its kind: what its dictionary is
    trained on, and (number 0) the fixture compressed with it."""
    body = _json(
        {
            "id": f"ord_{5531 + number:06d}",
            "object": "order",
            "status": "accepted",
            "total": {"amount": 1999 + 37 * number, "currency": "EUR"},
            "lines": [
                {"sku": f"SKU-{100 + number % 17}", "quantity": 1 + number % 3},
                {"sku": f"SKU-{200 + number % 11}", "quantity": 1},
            ],
            "shipping": {"method": "standard", "country": ["FR", "DE", "ES"][number % 3]},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
        }
    )
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Date", _date(at)),
        ("Location", f"/orders/ord_{5531 + number:06d}"),
        ("X-Request-Cost", str(3 + number % 5)),
        ("Cache-Control", "no-store"),
    ]
    return _answer(201, "Created", headers, body, at), body


def _trained_dictionary() -> bytes:
    """Route `orders`' own dictionary, trained as the release trains one: on its first
    SAMPLES packed answers, each cut to SAMPLE_MAX bytes."""
    samples = []
    for number in range(1, SAMPLES + 1):
        record, body = _order(number, STORED_AT - 86_400 + 300 * number)
        samples.append(pack_answer(record, body)[:SAMPLE_MAX])
    trained: bytes = zstandard.train_dictionary(SIZE, samples).as_bytes()
    return trained


def fixtures() -> list[Fixture]:
    order, order_body = _order(0, STORED_AT + 7)
    body_omitted = "body-not-recorded"
    return [
        Fixture(
            "typical-201",
            "A JSON 201 with many headers: Set-Cookie three times (one spelled in lower case), "
            "Latin-1 bytes in a value, a reason phrase of the upstream's own",
            "payments",
            BEARER,
            "order-1001",
            "POST",
            "/payments",
            "",
            b'{"amount":4200,"currency":"EUR","customer":"cus_8812"}',
            _answer(201, "Payment Recorded", TYPICAL, PAYMENT, STORED_AT),
            PAYMENT,
            None,
            {},
        ),
        Fixture(
            "empty-body",
            "A 200 with an empty body (Content-Length: 0)",
            "payments",
            BEARER,
            "capture-1001",
            "PUT",
            "/payments/pay_7Qx2Lm9/capture",
            "",
            b"{}",
            _answer(200, "OK", [("Content-Length", "0"), ("X-Captured", "1")], b"", STORED_AT + 1),
            b"",
            None,
            {},
        ),
        Fixture(
            "no-content",
            "A 204 in the anonymous scope (no Authorization): no body, no Content-Length",
            "payments",
            None,
            "cancel-77",
            "PATCH",
            "/subscriptions/sub_9",
            "",
            b'{"cancel_at_period_end":true}',
            _answer(
                204,
                "No Content",
                [("Date", _date(STORED_AT + 2)), ("X-Deleted", "1")],
                b"",
                STORED_AT + 2,
            ),
            b"",
            None,
            {},
        ),
        Fixture(
            "body-too-large",
            "A 200 whose body (101 MiB) was over max_recorded_body: not kept, its size and "
            "digest only",
            "payments",
            BEARER,
            "export-2026-10",
            "POST",
            "/reports/export",
            "",
            b'{"period":"2026-10"}',
            Record(
                status=200,
                headers=[("Content-Type", "application/pdf"), ("Content-Length", str(TOO_LARGE))],
                size=TOO_LARGE,
                sha256=REPORT_SHA256,
                completed_at=STORED_AT + 3,
                extra={"body": "too-large"},
                reason="OK",
            ),
            b"",
            None,
            {"status": 502, "code": body_omitted},
        ),
        Fixture(
            "unknown-outcome",
            "An UNKNOWN outcome: its owner's lease ended unrenewed, a retry took the key over "
            "and recorded it (the lost owner's token kept in the value)",
            "payments",
            BEARER,
            "order-1002",
            "POST",
            "/payments",
            "",
            b'{"amount":990,"currency":"EUR","customer":"cus_8812"}',
            Record(
                status=502,
                headers=[],
                size=0,
                sha256="",
                completed_at=STORED_AT + 4,
                unknown=True,
                extra={"failure": "owner-lost", "detail": "lease ended unrenewed", "seen": "502"},
            ),
            b"",
            None,
            {"status": 502, "code": "outcome-unknown"},
            lost_owner=True,
        ),
        Fixture(
            "raw-body",
            "An incompressible body (2048 bytes of SHAKE-256), sent chunked: stored raw, codec 0",
            "payments",
            BEARER,
            "blob-4",
            "POST",
            "/files",
            "",
            b'{"name":"noise.bin"}',
            _answer(
                200,
                "OK",
                [("Content-Type", "application/octet-stream")],  # chunked: no length
                NOISE,
                STORED_AT + 5,
            ),
            NOISE,
            RAW,
            {},
        ),
        Fixture(
            "shipped-dictionary",
            "A short JSON 200 compressed with the shipped dictionary 1",
            "payments",
            BEARER,
            "refund-31",
            "POST",
            "/refunds",
            "",
            b'{"payment":"pay_7Qx2Lm9","amount":1200}',
            _answer(
                200,
                "OK",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(REFUND))),
                    ("Date", _date(STORED_AT + 6)),
                ],
                REFUND,
                STORED_AT + 6,
            ),
            REFUND,
            1,
            {},
        ),
        Fixture(
            "trained-dictionary",
            "A JSON 201 of route orders, compressed with the route's own trained dictionary "
            f"({OWN}, kept in the hash {PREFIX}:dictionaries:orders); the request has a query",
            "orders",
            BEARER,
            "cart-5531",
            "POST",
            "/orders",
            "expand=lines",
            b'{"cart":"cart_5531","shipping":"standard"}',
            order,
            order_body,
            OWN,
            {},
            dictionary=_trained_dictionary(),
        ),
    ]


# Writing, as the release's Store does


def _token(name: str, who: str) -> str:
    """An owner token as the release makes one (`http.flow.handler.new_token`: 12 bytes in
    base64url), drawn from the fixture's name so that a run writes what the last one did."""
    raw = hashlib.sha256(f"{name}:{who}".encode()).digest()[:12]
    return binascii.b2a_base64(raw, newline=False).translate(URL_SAFE).decode()


class Scripts:
    """The release's claim.lua and complete.lua on a Redis, called with the arguments its
    Store gives them (format 2 written: the claim under format 2's name)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.claim_sha = client.script_load(_script("claim"))
        self.complete_sha = client.script_load(_script("complete"))

    def claim(self, names: tuple[str, str], fp: str, token: str, lease_ms: int) -> bytes:
        now_ms = int(time.time() * 1000)
        args = (fp, token, lease_ms, now_ms, RETENTION_MS, b"take", b"", fingerprint_field(fp))
        reply = self.client.evalsha(self.claim_sha, 2, names[1], names[0], *args)
        return bytes(reply[0])

    def complete(self, name: str, token: str, state: str, value: bytes, fp: str) -> None:
        args = (token, state, value, b"", RETENTION_MS, fp, b"2")
        stored = self.client.evalsha(self.complete_sha, 1, name, *args)
        if stored != 1:
            raise SystemExit(f"{name}: complete.lua answered {stored!r}")


def _script(name: str) -> str:
    return (TREE / "lua" / f"{name}.lua").read_text(encoding="utf-8")


def _written(scripts: Scripts, fixture: Fixture, codec: Codec, fp: str) -> tuple[str, bytes]:
    """The fixture's answer stored as the release stores it: its format-2 name, its value."""
    names = record_names(PREFIX, fixture.route, tenant_id([fixture.scope]), digest(fixture.key))
    token = _token(fixture.name, "owner")
    if fixture.lost_owner:
        lost = token
        if scripts.claim(names, fp, lost, 1) != b"CLAIMED":
            raise SystemExit(f"{fixture.name}: not claimed")
        token = _token(fixture.name, "taker")
        deadline = time.monotonic() + 5.0
        while scripts.claim(names, fp, token, 30_000) != b"TAKEN":  # once the lease is over
            if time.monotonic() > deadline:
                raise SystemExit(f"{fixture.name}: the lost owner's key was never taken")
            time.sleep(0.01)
    elif scripts.claim(names, fp, token, 30_000) != b"CLAIMED":
        raise SystemExit(f"{fixture.name}: not claimed")
    own = Dictionary(OWN, fixture.dictionary) if fixture.dictionary is not None else None
    packed = pack_answer(fixture.record, fixture.inline)
    state = STATE_UNKNOWN if fixture.record.unknown else STATE_COMPLETED
    given = codec.pack(state, fingerprint_field(fp), token, packed, own)
    scripts.complete(names[1], token, state, given, fp)
    value = scripts.client.get(names[1])
    if not isinstance(value, bytes):
        raise SystemExit(f"{fixture.name}: nothing stored under {names[1]}")
    return names[1], value


def _checked(fixture: Fixture, codec: Codec, value: bytes) -> None:
    """The value is read back by the release as the answer it packed, with the codec the
    fixture is about."""
    found = Codec.dictionary_of(value)
    if fixture.codec is not None and found != fixture.codec:
        raise SystemExit(f"{fixture.name}: compressed with codec {found}, not {fixture.codec}")
    own = {OWN: Dictionary(OWN, fixture.dictionary)} if fixture.dictionary is not None else None
    record, body = codec.unpack(value, own)
    if (record.status, record.reason, record.headers, body) != (
        fixture.record.status,
        fixture.record.reason,
        fixture.record.headers,
        fixture.inline,
    ):
        raise SystemExit(f"{fixture.name}: the release reads another answer back")


def _entry(fixture: Fixture, fp: str, name: str, value: bytes) -> dict[str, Any]:
    record = fixture.record
    if fixture.replay:
        replay = {"kind": "problem", **fixture.replay}
    else:
        replay = {
            "kind": "answer",
            "status": record.status,
            "reason": record.reason,
            "headers": [list(header) for header in record.headers],
            "body_hex": fixture.inline.hex(),
        }
    return {
        "name": fixture.name,
        "about": fixture.about,
        "route": fixture.route,
        "scope": fixture.scope,
        "key": fixture.key,
        "request": {
            "method": fixture.method,
            "path": fixture.path,
            "query": fixture.query,
            "body_hex": fixture.body.hex(),
        },
        "fingerprint": fp,
        "record_name": name,
        "codec": Codec.dictionary_of(value),
        "value_hex": value.hex(),
        "replay": replay,
    }


# The run


def _release_blobs() -> dict[str, str]:
    """Path -> blob id of the release's tree, from the git repository of this file."""
    listing = subprocess.run(
        ["git", "-C", str(HERE), "ls-tree", "-r", "--full-tree", RELEASE, "--", "gateway", "lua"],
        capture_output=True,
        text=True,
        check=False,
    )
    if listing.returncode != 0:
        raise SystemExit(f"git cannot list release {RELEASE}: {listing.stderr.strip()}")
    blobs = {}
    for line in listing.stdout.splitlines():
        meta, path = line.split("\t", 1)
        blobs[path] = meta.split()[2]
    return blobs


def _blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def check_release_tree() -> None:
    """Every gateway module loaded, the scripts and the shipped dictionaries are the
    release's own, byte for byte."""
    blobs = _release_blobs()
    used = [Path(m.__file__) for n, m in sys.modules.items() if n.split(".")[0] == "gateway"]
    used += [TREE / "lua" / "claim.lua", TREE / "lua" / "complete.lua"]
    used += sorted((TREE / "gateway" / "store" / "dictionaries").glob("*.zdict"))
    for path in used:
        relative = path.resolve().relative_to(TREE).as_posix()
        if blobs.get(relative) != _blob_id(path):
            raise SystemExit(
                f"{path} is not release {RELEASE}'s (run with PYTHONPATH set to its tree)"
            )


@contextmanager
def scratch_redis() -> Iterator[redis.Redis]:
    """A redis-server of PATH on a Unix socket in a folder of its own, stopped after."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("no redis-server on PATH")
    folder = tempfile.mkdtemp(prefix="format2-")
    socket = os.path.join(folder, "redis.sock")
    options = ["--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no"]
    server = subprocess.Popen([binary, *options, "--dir", folder], stdout=subprocess.DEVNULL)
    try:
        client = redis.Redis(unix_socket_path=socket)
        deadline = time.monotonic() + 10.0
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the scratch redis-server did not start") from None
                time.sleep(0.02)
        yield client
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    check_release_tree()
    codec = shipped_codec()
    entries, dictionaries = [], {}
    with scratch_redis() as client:
        scripts = Scripts(client)
        for fixture in fixtures():
            fp = fingerprint(
                BodySpec(), fixture.method, fixture.path, fixture.query, {}, fixture.body
            )
            name, value = _written(scripts, fixture, codec, fp)
            _checked(fixture, codec, value)
            entries.append(_entry(fixture, fp, name, value))
            if fixture.dictionary is not None:
                dictionaries[fixture.route] = {str(OWN): fixture.dictionary.hex()}
    document = {
        "release": RELEASE,
        "prefix": PREFIX,
        "retention_ms": RETENTION_MS,
        "dictionaries": dictionaries,
        "fixtures": entries,
    }
    OUT.write_text(json.dumps(document, indent=1, ensure_ascii=True) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(entries)} values of release {RELEASE}")


if __name__ == "__main__":
    main()
