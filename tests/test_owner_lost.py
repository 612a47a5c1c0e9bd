"""A key whose owner stopped renewing its lease after it may have sent the request (a gateway
SIGKILLed or frozen mid-call) is an unknown outcome, never a free key: the next claim asks
the route's reconcile lookup, else follows its `on_owner_lost` policy. The same under faults
(the takeover's reply lost, owners that resume, retries racing): test_owner_lost_faults.py;
both use the kit in lostowner.py."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis
from aiohttp import web

from gateway.core.claims import Claim
from gateway.store.store import Store
from gateway.telemetry.logs import FIELDS
from testkit.polling import until
from testkit.procs import GatewayProcess

from .faultkit import metrics_of, records, value
from .gateways import AdminFactory, GatewayFactory
from .lostowner import (
    AUTH,
    KEY,
    Answer,
    claim_as_dead_owner,
    code,
    lookup_app,
    process_config,
    reconcile,
    retry,
    settle,
    settled,
)
from .scripted import answering, scripted
from .upstream import CountingUpstream, serving_app

LEASE = 1.0
LOOKED_UP = {"id": "pay_looked_up", "status": "captured"}


class Lookup:
    """The upstream's own view of a payment by key, as a real API could offer it: `mode` is
    what it says (happened, not_happened, error, hang)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.asked = 0

    async def find(self, request: web.Request) -> web.Response:
        self.asked += 1
        if self.mode == "hang":
            await asyncio.Event().wait()
        if self.mode == "happened":
            return web.json_response(LOOKED_UP)
        if self.mode == "not_happened":
            return web.json_response({"error": "no such payment"}, status=404)
        return web.Response(status=500, text="lookup broke")


@asynccontextmanager
async def serving_lookup(mode: str) -> AsyncIterator[tuple[Lookup, str]]:
    lookup = Lookup(mode)
    async with serving_app(lookup_app(lookup.find)) as origin:
        yield lookup, origin


async def two_gateways(
    gateways: list[GatewayProcess], tmp_path: Path, origin: str, redis_url: str, **route: Any
) -> tuple[GatewayProcess, GatewayProcess]:
    """The one that will be lost, and the one its client's retries go to."""
    victim, survivor = (
        GatewayProcess(process_config(origin, redis_url, lease=f"{LEASE}s", **route), tmp_path)
        for _ in range(2)
    )
    gateways.extend((victim, survivor))
    await asyncio.gather(*(asyncio.to_thread(g.start) for g in (victim, survivor)))
    return victim, survivor


async def killed_after_sending(
    counting: CountingUpstream, victim: GatewayProcess, session: aiohttp.ClientSession
) -> None:
    """The victim forwards the request; SIGKILL once the upstream has it."""
    first = asyncio.ensure_future(session.post(f"{victim.url}/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    await asyncio.to_thread(victim.kill)
    with pytest.raises(aiohttp.ClientError):
        await first
    counting.release.set()  # the orphaned call ends upstream; nobody hears its answer


async def retry_past_the_lease(session: aiohttp.ClientSession, url: str) -> Answer:
    """`settle` on the gateway process at `url`."""
    return await settle(lambda: retry(session, url), timeout=LEASE + 10, every=0.1)


class Killed:
    """A gateway SIGKILLed after it forwarded the request; its client's retries go to the
    gateway beside it: `settled` is the answer after the lease, `again` the retry after."""

    def __init__(self, gateways: list[GatewayProcess], tmp_path: Path) -> None:
        self.gateways = gateways
        self.tmp_path = tmp_path
        self.survivor: GatewayProcess | None = None

    async def retried(
        self, counting: CountingUpstream, origin: str, redis_url: str, **route: Any
    ) -> tuple[Answer, Answer]:
        victim, self.survivor = await two_gateways(
            self.gateways, self.tmp_path, origin, redis_url, **route
        )
        async with aiohttp.ClientSession() as session:
            await killed_after_sending(counting, victim, session)
            settled = await retry_past_the_lease(session, self.survivor.url)
            return settled, await retry(session, self.survivor.url)


@pytest.fixture
def killed(gateways: list[GatewayProcess], tmp_path: Path) -> Killed:
    return Killed(gateways, tmp_path)


async def test_without_a_lookup_a_killed_owners_key_is_held_as_unknown(
    upstream: tuple[CountingUpstream, str], redis_url: str, killed: Killed
) -> None:
    """on_owner_lost unset follows on_unknown_outcome (record): an UNKNOWN outcome for an
    operator, never a second run."""
    counting, origin = upstream
    answer, again = await killed.retried(counting, origin, redis_url, on_unknown_outcome="record")
    assert answer[0] == 502 and code(answer) == "owner-lost"
    assert answer[1]["Idempotency-Outcome"] == "unknown"
    assert again[0] == 502 and code(again) == "outcome-unknown"
    assert again[1]["Idempotent-Replayed"] == "true"
    assert counting.count("/gate") == 1
    [record] = records(redis_url)
    assert record[b"s"] == b"U" and b"owner-lost" in record[b"m"]
    assert killed.survivor is not None and "Traceback" not in killed.survivor.log()


async def test_keep_answers_409_owner_lost_and_never_runs_it_again(
    upstream: tuple[CountingUpstream, str], redis_url: str, killed: Killed
) -> None:
    counting, origin = upstream
    answer, again = await killed.retried(counting, origin, redis_url, on_owner_lost="keep")
    assert answer[0] == 409 and code(answer) == "owner-lost"
    assert answer[1]["Idempotency-Outcome"] == "unknown" and "Retry-After" in answer[1]
    assert again[0] == 409 and code(again) == "owner-lost"
    assert counting.count("/gate") == 1
    [record] = records(redis_url)
    assert record[b"s"] == b"P"


async def test_a_killed_owners_call_that_happened_is_recorded_from_the_lookup(
    upstream: tuple[CountingUpstream, str], redis_url: str, killed: Killed
) -> None:
    counting, origin = upstream
    async with serving_lookup("happened") as (lookup, lookup_origin):
        answer, again = await killed.retried(
            counting, origin, redis_url, reconcile=reconcile(lookup_origin), on_owner_lost="record"
        )
    assert answer[0] == 201 and orjson.loads(answer[2]) == LOOKED_UP
    assert answer[1]["Idempotency-Outcome"] == "reconciled"
    assert (again[0], again[2]) == (201, answer[2])
    assert again[1]["Idempotent-Replayed"] == "true"
    assert lookup.asked == 1
    assert counting.count("/gate") == 1


async def test_a_killed_owners_call_that_did_not_happen_runs_once_now(
    upstream: tuple[CountingUpstream, str], redis_url: str, killed: Killed
) -> None:
    counting, origin = upstream
    async with serving_lookup("not_happened") as (_, lookup_origin):
        answer, again = await killed.retried(
            counting, origin, redis_url, reconcile=reconcile(lookup_origin), on_owner_lost="record"
        )
    assert answer[0] == 201 and answer[2].startswith(b"gated #")
    assert answer[1]["Idempotency-Outcome"] == "not-happened"
    assert (again[0], again[2]) == (201, answer[2])
    assert "Idempotency-Outcome" not in again[1]  # the record is the upstream's answer
    # The lookup said the first never ran: the upstream's count of arrivals holds both.
    assert counting.count("/gate") == 2


@pytest.mark.parametrize("mode", ["error", "hang", "garbage"])
async def test_a_lookup_that_cannot_tell_falls_back_to_on_owner_lost(
    upstream: tuple[CountingUpstream, str], redis_url: str, killed: Killed, mode: str
) -> None:
    """A lookup that fails, hangs past its timeout or answers bytes that are no HTTP: the
    route's policy (record), never a traceback and never a second run."""
    counting, origin = upstream
    junk_bytes = answering(b"\x16\x03\x01garbage\r\n\r\n", keep=False)
    async with scripted(junk_bytes) as (_, junk), serving_lookup(mode) as (_, lookup_origin):
        where = junk if mode == "garbage" else lookup_origin
        answer, _ = await killed.retried(
            counting, origin, redis_url, reconcile=reconcile(where), on_owner_lost="record"
        )
    assert answer[0] == 502 and code(answer) == "owner-lost"
    assert counting.count("/gate") == 1
    assert killed.survivor is not None and "Traceback" not in killed.survivor.log()


CONTROL_BYTE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\x01\r\nContent-Length: 2\r\n"
    b"Connection: close\r\n\r\n{}"
)


@pytest.mark.parametrize("mode", ["redirect", "huge", "control-byte"])
async def test_a_lookup_that_redirects_or_answers_huge_or_unreplayable_is_unclear(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str, mode: str
) -> None:
    """Never followed, never recorded: the route's on_owner_lost (record), no second run."""
    counting, _ = upstream

    async def find(request: web.Request) -> web.StreamResponse:
        if mode == "redirect":
            raise web.HTTPFound("/found")
        return web.Response(status=200, body=b"x" * (4 << 20))

    async def found(request: web.Request) -> web.Response:
        return web.json_response({"id": "pay_elsewhere"})

    app = web.Application()
    app.router.add_get("/by-key/{key}", find)
    app.router.add_get("/found", found)
    async with serving_app(app) as lookup, scripted(answering(CONTROL_BYTE, keep=False)) as raw:
        where = raw[1] if mode == "control-byte" else lookup
        rule = {**reconcile(where), "happened": [200], "max_body": "64KiB"}
        gw = await make_gateway(on_owner_lost="record", reconcile=rule)
        await claim_as_dead_owner(redis_url, gw)
        answer = await settled(gw)
        if mode == "control-byte":
            assert raw[0].requests  # it was asked, and answered
    assert answer[0] == 502 and code(answer) == "owner-lost", answer
    assert counting.count("/gate") == 0


async def test_a_stalled_owner_that_comes_back_replaces_the_unknown_with_its_answer(
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    gateways: list[GatewayProcess],
) -> None:
    """SIGSTOP longer than the lease: the key is held as unknown meanwhile; when the owner
    resumes, the answer that really came becomes the record."""
    counting, origin = upstream
    victim, survivor = await two_gateways(
        gateways, tmp_path, origin, redis_url, on_owner_lost="record"
    )
    assert victim.process is not None
    async with aiohttp.ClientSession() as session:
        first = asyncio.ensure_future(session.post(f"{victim.url}/gate", data=b"x", headers=KEY))
        await counting.entered.wait()
        victim.signal(signal.SIGSTOP)
        try:
            held = await retry_past_the_lease(session, survivor.url)
            assert held[0] == 502 and code(held) == "owner-lost"
        finally:
            victim.signal(signal.SIGCONT)
        counting.release.set()
        async with await first as resp:
            assert (resp.status, await resp.read()) == (201, b"gated #1")

        async def replayed() -> bool:
            answer = await retry(session, survivor.url)
            return answer[0] == 201 and answer[2] == b"gated #1"

        await until(replayed, timeout=10)
    assert counting.count("/gate") == 1


async def test_release_runs_it_again_marked_rerun(
    upstream: tuple[CountingUpstream, str], redis_url: str, killed: Killed
) -> None:
    """`release` (the default) keeps at-least-once, as asked, and says so in the answer."""
    counting, origin = upstream
    answer, again = await killed.retried(counting, origin, redis_url)
    assert answer[0] == 201 and answer[1]["Idempotency-Outcome"] == "rerun"
    assert (again[0], again[2]) == (201, answer[2])
    assert counting.count("/gate") == 2


# In process: a claim left as a dead gateway leaves it, written by the store itself.


async def test_mark_sent_a_key_whose_owner_died_before_sending_runs_as_new(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    counting.release.set()
    gw = await make_gateway(mark_sent=True, on_owner_lost="record")
    await claim_as_dead_owner(redis_url, gw, sent=False)
    status, headers, body = await settled(gw)
    assert (status, body) == (201, b"gated #1") and "Idempotency-Outcome" not in headers
    assert counting.count("/gate") == 1
    metrics = metrics_of(gw)
    assert value(metrics, "idem_owner_lost_total", route="api", resolution="unsent") == 1
    [record] = records(redis_url)
    assert record[b"s"] == b"C" and b"u" not in record and b"l" not in record


async def test_mark_sent_a_key_marked_sent_is_a_lost_owners(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    gw = await make_gateway(mark_sent=True, on_owner_lost="record")
    await claim_as_dead_owner(redis_url, gw)
    status, _, body = await settled(gw)
    assert status == 502 and orjson.loads(body)["code"] == "owner-lost"
    assert counting.count("/gate") == 0


async def test_mark_sent_marks_each_new_key_before_forwarding(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    """While the upstream holds the call, the key says it may have been sent."""
    counting, _ = upstream
    gw = await make_gateway(mark_sent=True)
    first = asyncio.ensure_future(gw.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    [record] = records(redis_url)
    assert record[b"s"] == b"P" and b"u" not in record
    counting.release.set()
    assert (await first).status == 201


async def test_a_lost_owner_is_counted_logged_and_shown(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    gw = await make_gateway(on_owner_lost="record")
    admin = await make_admin(gw)
    await claim_as_dead_owner(redis_url, gw, mark_sent=False, sent=False)
    show = {"route": "api", "key": KEY["Idempotency-Key"]}

    async def lost() -> bool:
        doc = await (await admin.post("/keys/show", json=show, headers=AUTH)).json()
        return bool(doc["state"] == "owner-lost")

    await until(lost, timeout=10, every=0.05)
    doc = await (await admin.post("/keys/show", json=show, headers=AUTH)).json()
    assert doc["maybe_sent"] is True and doc["lease_ended_seconds_ago"] >= 0
    caplog.set_level(logging.INFO, logger="gateway.http.server.access")
    status, headers, _ = await settled(gw)
    assert status == 502 and headers["Idempotency-Outcome"] == "unknown"
    metrics = metrics_of(gw)
    assert value(metrics, "idem_owner_lost_total", route="api", resolution="held") == 1
    lines = [getattr(r, FIELDS) for r in caplog.records if r.name == "gateway.http.server.access"]
    assert lines[-1]["owner_lost"] == "held" and lines[-1]["status"] == 502
    said = [getattr(r, FIELDS) for r in caplog.records if "event" in getattr(r, FIELDS, {})]
    assert said == [
        {"event": "owner-lost", "route": "api", "request_id": lines[-1]["request_id"],
         "settled": "held"}
    ]  # fmt: skip
    doc = await (await admin.post("/keys/show", json=show, headers=AUTH)).json()
    assert doc["state"] == "unknown" and doc["taken_over"] == 1
    assert doc["extra"]["failure"] == "owner-lost"
    assert counting.count("/gate") == 0


async def test_a_key_claimed_by_an_earlier_version_keeps_its_ttl_as_its_lease(
    redis_url: str, redis_store: Store
) -> None:
    """A PENDING key written before the lease became a field (no 'l'): in flight for as long
    as its TTL, as that version meant, then free."""
    raw = redis.Redis.from_url(redis_url)
    raw.hset("idem:{old}", mapping={"s": "P", "t": "old-owner", "f": "fp"})
    raw.pexpire("idem:{old}", 60_000)
    raw.close()
    result = await redis_store.claim("idem:{old}", "fp", "new", 5.0, 60.0)
    assert result.outcome is Claim.IN_FLIGHT and 50_000 < result.pttl_ms <= 60_000


async def test_an_operator_resolves_a_kept_lost_owners_key(
    make_gateway: GatewayFactory,
    make_admin: AdminFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
) -> None:
    """`keep` holds the key as its lost owner left it; an operator who knows what happened
    stores it (or purges it), as for an UNKNOWN outcome. A live lease is never resolved."""
    counting, _ = upstream
    gw = await make_gateway(on_owner_lost="keep", lease="30s")
    admin = await make_admin(gw)
    target = {"route": "api", "key": KEY["Idempotency-Key"]}
    live = asyncio.ensure_future(gw.post("/gate", data=b"x", headers=KEY))
    await counting.entered.wait()
    early = await admin.post("/keys/resolve", json={**target, "status": 201}, headers=AUTH)
    assert early.status == 409 and (await early.json())["code"] == "record-not-unknown"
    counting.release.set()
    assert (await live).status == 201
    purged = await admin.post("/keys/purge", json={**target, "confirm": True}, headers=AUTH)
    assert purged.status == 200

    await claim_as_dead_owner(redis_url, gw, mark_sent=False, sent=False)
    status, _, body = await settled(gw)
    assert status == 409 and orjson.loads(body)["code"] == "owner-lost"
    resolve = {**target, "status": 201, "body": "settled by hand"}
    assert (await admin.post("/keys/resolve", json=resolve, headers=AUTH)).status == 200
    replay = await gw.post("/gate", data=b"x", headers=KEY)
    assert (replay.status, await replay.read()) == (201, b"settled by hand")
    assert counting.count("/gate") == 1  # the live one alone
