"""The differential corpus: every answer of tests/corpus/answers.yaml, as the upstream sent it
(a client talking to it directly), is compared byte for byte with the gateway's first answer,
its replay and its pass-through (no key), after removing only the differences that
docs/fidelity.md allows. The test reads that table: a difference it does not list fails."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.config.policy import DEFAULT_RECORD
from gateway.core.decision import records

from .conftest import GatewayFactory, gateway_settings
from .hostile import Wire, start_gateway
from .rawhttp import Entry, Parsed, corpus, corpus_upstream, exchange, parse

DOC = Path(__file__).parent.parent / "docs" / "fidelity.md"
ENTRIES = corpus()


@dataclass(frozen=True)
class Allowed:
    """docs/fidelity.md's table of allowed differences, read by kind."""

    added: frozenset[bytes]  # headers the gateway may add or replace
    if_absent: frozenset[bytes]  # headers the gateway may add when the upstream sent none
    hop_by_hop: frozenset[bytes]  # headers of one hop, dropped and written per hop
    framing: frozenset[bytes]  # may differ when the upstream did not frame by length
    no_content: frozenset[bytes]  # dropped from a 204 answer
    kinds: frozenset[str]

    @classmethod
    def read(cls) -> Allowed:
        rows: dict[str, set[bytes]] = {}
        for line in DOC.read_text("utf-8").splitlines():
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) != 4 or cells[0] in ("kind", "---"):
                continue
            names = {name.lower().encode() for name in re.findall(r"`([^`]+)`", cells[1])}
            rows.setdefault(cells[0], set()).update(names)
        return cls(
            frozenset(rows.get("added", ())),
            frozenset(rows.get("added-if-absent", ())),
            frozenset(rows.get("hop-by-hop", ())),
            frozenset(rows.get("framing", ())),
            frozenset(rows.get("no-content", ())),
            frozenset(rows),
        )


ALLOWED = Allowed.read()


def _comparable(answer: Parsed, direct: Parsed) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The status (code and reason) and headers left once the allowed differences are gone."""
    drop = set(ALLOWED.added | ALLOWED.hop_by_hop)
    for name, value in direct.headers:  # the names the upstream's Connection lists
        if name.lower() == b"connection":
            drop |= {token.strip().lower() for token in value.split(b",")}
    direct_names = {name.lower() for name, _ in direct.headers}
    drop |= {name for name in ALLOWED.if_absent if name not in direct_names}
    if direct.framing != "length":
        drop |= ALLOWED.framing
    if direct.status.startswith(b"204"):
        drop |= ALLOWED.no_content
    kept = [(name, value) for name, value in answer.headers if name.lower() not in drop]
    return answer.status, kept


def differences(direct: Parsed, answer: Parsed) -> list[str]:
    """What differs beyond the allowed list, said briefly (empty: nothing)."""
    found = []
    status, headers = _comparable(direct, direct)
    got_status, got_headers = _comparable(answer, direct)
    if got_status != status:
        found.append(f"status line {status!r} -> {got_status!r}")
    if got_headers != headers:
        found += _header_differences(headers, got_headers)
    if answer.body != direct.body:
        found.append(f"body ({len(direct.body)} -> {len(answer.body)} bytes)")
    if answer.trailers and "trailers" not in ALLOWED.kinds:
        found.append("trailers")
    if direct.informational and "informational" not in ALLOWED.kinds:
        found.append("1xx dropped")
    if answer.version != direct.version and "version" not in ALLOWED.kinds:
        found.append("version")
    return found


def _header_differences(
    sent: list[tuple[bytes, bytes]], got: list[tuple[bytes, bytes]]
) -> list[str]:
    added = list((Counter(got) - Counter(sent)).elements())
    missing = list((Counter(sent) - Counter(got)).elements())
    found = []
    for name, value in added:
        twin = next((pair for pair in missing if pair[0].lower() == name.lower()), None)
        if twin is None:
            found.append(f"added {name!r}: {value!r}")
            continue
        missing.remove(twin)
        if twin[0] != name:
            found.append(f"name {twin[0]!r} -> {name!r}")
        if twin[1] != value:
            found.append(f"{name!r} value {twin[1]!r} -> {value!r}")
    found += [f"missing {name!r}: {value!r}" for name, value in missing]
    return found or ["header order"]


def request(entry: Entry, key: str | None) -> bytes:
    lines = [f"{entry.method} /c/{entry.name} HTTP/1.1", "Host: corpus", "Connection: close"]
    if key is not None:
        lines += [f"Idempotency-Key: {key}", "Authorization: Bearer corpus-tenant"]
    body = b"" if entry.method == "HEAD" else b"x"
    if body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_the_allowed_differences_are_read_from_the_docs() -> None:
    assert {b"idempotent-replayed", b"x-request-id", b"date", b"connection"} <= (
        ALLOWED.added | ALLOWED.if_absent | ALLOWED.hop_by_hop
    )
    assert ALLOWED.framing == {b"transfer-encoding", b"content-length"}
    assert len(ENTRIES) >= 30


@pytest.mark.parametrize("record_format", [1, 2], ids=["format-1", "format-2"])
@pytest.mark.parametrize("entry", ENTRIES, ids=[entry.name for entry in ENTRIES])
async def test_the_gateway_answers_as_the_upstream_did(
    entry: Entry, record_format: int, make_gateway: GatewayFactory, tmp_path: Path
) -> None:
    """Recorded in either format (bodies over 1 KiB in the blob store), replayed the same."""
    async with corpus_upstream([entry]) as (upstream, port):
        origin = f"http://127.0.0.1:{port}"
        settings = gateway_settings(
            origin,
            redis={"record_format": record_format},
            blob={"url": f"file://{tmp_path}/blobs"},
            inline_max=1024,
            methods=["POST", "HEAD"],
        )
        gateway = await make_gateway(settings=settings)
        direct = await exchange(port, request(entry, None))
        key = f"corpus-{entry.name}"
        answers = {
            "first": await exchange(gateway.port, request(entry, key)),
            "replay": await exchange(gateway.port, request(entry, key)),
            "pass-through": await exchange(gateway.port, request(entry, None)),
        }
    head = entry.method == "HEAD"
    seen = parse(direct, head)
    found = {
        name: differs
        for name, raw in answers.items()
        if (differs := differences(seen, parse(raw, head)))
    }
    assert not found, f"{entry.name}: {found}"
    recorded = records(DEFAULT_RECORD, int(seen.status[:3]))
    assert upstream.calls[entry.name] == (3 if recorded else 4)  # direct, first, pass-through
    if recorded:
        assert b"idempotent-replayed: true" in answers["replay"].lower()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_a_gateway_process_answers_as_the_upstream_did_under_either_loop(
    loop: str, redis_url: str, tmp_path: Path, wire: Wire
) -> None:
    """The whole corpus through a gateway process (its own server, not aiohttp's router, and
    the configured loop), first answers, replays and pass-throughs alike; over plain HTTP
    and over TLS to the gateway; its records in format 2 (format 1's: the test above)."""
    found = {}
    async with corpus_upstream(ENTRIES) as (_, port):
        gateway = start_gateway(
            f"http://127.0.0.1:{port}", redis_url, tmp_path, {}, loop=loop, wire=wire,
            redis={"record_format": 2}, inline_max=1024, methods=["POST", "HEAD"],
        )  # fmt: skip
        try:
            for entry in ENTRIES:
                head = entry.method == "HEAD"
                seen = parse(await exchange(port, request(entry, None)), head)
                key = f"process-{loop}-{entry.name}"
                for way, sent in (("first", key), ("replay", key), ("pass-through", None)):
                    raw = await exchange(gateway.port, request(entry, sent), wire.client)
                    if differs := differences(seen, parse(raw, head)):
                        found[f"{entry.name} {way}"] = differs
        finally:
            gateway.stop()
    assert not found, found
