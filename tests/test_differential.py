"""The differential corpus: every answer of tests/corpus/answers.yaml, as the upstream sent it
(a client talking to it directly), is compared byte for byte with the gateway's first answer,
its replay and its pass-through (no key), after removing only the differences that
docs/fidelity.md allows. The test reads that table: a difference it does not list fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config.policy import DEFAULT_RECORD
from gateway.core.decision import records

from .differences import ALLOWED, differences, request
from .gateways import GatewayFactory, gateway_settings
from .hostile import Wire, start_gateway
from .rawhttp import Entry, corpus, corpus_upstream, exchange, parse

ENTRIES = corpus()


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
                    raw = await exchange(gateway.port, request(entry, sent), tls=wire.client)
                    if differs := differences(seen, parse(raw, head)):
                        found[f"{entry.name} {way}"] = differs
        finally:
            gateway.stop()
    assert not found, found
