"""Settling a claimed key once its upstream call is over: store the outcome, release the key,
or record an unknown outcome.

An outcome that ran upstream is never given up while the gateway lives. When Redis cannot
take it at once, it is written to the local journal (fsynced) before the client is answered,
and a background task keeps storing it, renewing the lease meanwhile so that retries get 409
rather than a second run; a restart replays the journal (`replay_journal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from enum import Enum
from http import HTTPStatus
from typing import Final

from aiohttp import web

from gateway.blobs.recorder import BodyRecorder, RecordedBody
from gateway.config.policy import Route
from gateway.config.reconcile import Reconcile
from gateway.core.backoff import STORE_AGAIN
from gateway.core.decision import (
    Failure,
    Settle,
    after_lookup,
    failure_status,
    on_failure,
    on_lookup,
)
from gateway.core.record import Record
from gateway.core.retention import expires
from gateway.errors import StoreUnavailable
from gateway.http.answers.problems import OUTCOME, OUTCOME_UNKNOWN
from gateway.http.answers.writing import upstream_failure, whole_answer
from gateway.http.flow.context import Claimed, Services
from gateway.http.flow.pacing import Pacing
from gateway.http.flow.reconcile import Found, look_up
from gateway.store.journal import Unstored, orphans
from gateway.telemetry import metrics as m
from gateway.telemetry.events import Event, event_fields

log = logging.getLogger(__name__)

# The answer of an owner whose completion a newer claim fenced off: it ran upstream, but the
# record (and every replay) is the newer claim's answer.
FENCED: Final = {OUTCOME: "fenced"}


class Kept(Enum):
    """Where an answer's outcome is once settling it is over."""

    STORED = "stored"  # in Redis: every retry replays it
    FENCED = "fenced"  # not stored: a newer claim holds the key, its answer is the record
    JOURNALED = "journaled"  # on local disk, stored in the background: a restart replays it
    # Neither Redis nor the journal took it: stored in the background, but a crash loses it
    # and a retry after the lease would run the call again. The client must not get it whole.
    IN_MEMORY = "in_memory"


REPLAY_LEASE: Final = 30.0  # renewed for an outcome replayed from a journal: its route may be gone


async def record_answer(
    s: Services,
    c: Claimed,
    status: int,
    reason: str,
    headers: list[tuple[str, str]],
    body: RecordedBody,
    *,
    lease_lost: bool,
) -> Kept:
    """Store an upstream answer, or keep it until Redis takes it."""
    record = Record(
        status=status,
        headers=headers,
        size=body.size,
        sha256=body.sha256,
        blob=body.blob,
        completed_at=time.time(),
        extra={"body": body.not_recorded} if body.not_recorded else {},
        reason=reason,
    )
    kept = await store_outcome(s, c, record, body.inline)
    if kept is Kept.FENCED or lease_lost:
        s.metrics.lease_lost.labels(c.route.name).inc()
    return kept


async def store_outcome(s: Services, c: Claimed, record: Record, body: bytes) -> Kept:
    """Complete the claim now, or journal the outcome and keep completing it in the
    background (in memory alone when the journal cannot be written either)."""
    route = c.route
    try:
        stored = await s.spans.record(
            s.store.complete(
                c.record_key, c.token, c.fingerprint, record, body, route.retention, c.lost
            )
        )
    except StoreUnavailable as exc:
        s.metrics.redis_errors.inc()
        s.metrics.outcomes_unstored.labels(route.name).inc()
        log.error("route %s: outcome not stored yet, journaled: %s", route.name, exc)
    else:
        if not stored:
            await _fenced(s, route.name, record)
            return Kept.FENCED
        return Kept.STORED
    outcome = Unstored(c.record_key, c.token, c.fingerprint, record, body, route.retention, c.lost)
    entry = await _journal(s, outcome)
    s.tasks.spawn(keep_storing(s, c.route.name, c.route.lease, outcome, entry))
    return Kept.IN_MEMORY if entry is None else Kept.JOURNALED


def _complete(s: Services, outcome: Unstored) -> Awaitable[bool]:
    return s.spans.record(
        s.store.complete(
            outcome.key,
            outcome.token,
            outcome.fingerprint,
            outcome.record,
            outcome.body,
            outcome.retention,
            outcome.lost,
        )
    )


async def _journal(s: Services, outcome: Unstored) -> int | None:
    try:
        return await asyncio.to_thread(s.journal.add, outcome)
    except OSError as exc:  # a full or read-only disk: the outcome lives in memory only
        log.error("journal write failed, the outcome is kept in memory only: %s", exc)
        return None


async def keep_storing(
    s: Services, route: str, lease: float, outcome: Unstored, entry: int | None
) -> None:
    """Complete `outcome` as soon as Redis takes it; renew its lease while it cannot."""
    pacing = Pacing(STORE_AGAIN)
    while True:
        try:
            stored = await _complete(s, outcome)
        except StoreUnavailable:
            s.metrics.redis_errors.inc()
            with contextlib.suppress(StoreUnavailable):
                await s.store.extend(outcome.key, outcome.token, lease, outcome.retention)
            await pacing.pause()
            continue
        if stored:  # the blob's age first: a crash before the journal's mark repeats it
            await _stored_late(s, outcome)
        if entry is not None:
            await asyncio.to_thread(s.journal.stored, entry)
        if stored:
            log.info("route %s: a journaled outcome is stored now", route)
        else:
            await _fenced(s, route, outcome.record)
        return


async def _stored_late(s: Services, outcome: Unstored) -> None:
    """The record's retention runs from now: so does its blob's age, or the sweep would
    remove the blob of a live record as long before its end as Redis took to store it."""
    if outcome.record.blob is not None:
        await s.blobs.renew(outcome.record.blob)


async def _fenced(s: Services, route: str, record: Record) -> None:
    s.metrics.fenced.labels(route).inc()
    log.error("route %s: lease lost, a newer claim holds the key: outcome not stored", route)
    if record.blob is not None:
        await s.blobs.delete(record.blob)  # no record points at it


async def replay_journal(s: Services) -> None:
    """Store the outcomes that gateways gone before left in their journals; those Redis does
    not take now are adopted into this process's journal and kept storing."""
    for path, outcomes in orphans(s.journal.folder):
        for outcome in outcomes:
            s.metrics.journal_replayed.inc()
            try:
                stored = await _complete(s, outcome)
            except StoreUnavailable:
                entry = await _journal(s, outcome)
                s.tasks.spawn(keep_storing(s, "-", REPLAY_LEASE, outcome, entry))
                continue
            if stored:
                await _stored_late(s, outcome)
            else:
                await _fenced(s, "-", outcome.record)
        path.unlink(missing_ok=True)
        log.warning("journal %s replayed: %d outcomes", path.name, len(outcomes))


async def release(s: Services, route: Route, record_key: str, token: str) -> None:
    try:
        if not await s.store.release(record_key, token):
            s.metrics.lease_lost.labels(route.name).inc()
            log.warning("release on route %s: the key has another owner now", route.name)
    except StoreUnavailable as exc:
        # The lease ends by itself; until then retries get 409.
        s.metrics.redis_errors.inc()
        log.error("release failed on route %s: %s", route.name, exc)


async def settle_failure(
    s: Services, c: Claimed, kind: Failure, exc: BaseException
) -> web.Response | None:
    """Settle a call that got no complete answer; the client's answer, or None when it must
    get none whole (what was recorded for it is kept only in memory: `Kept.IN_MEMORY`)."""
    route = c.route
    settle = on_failure(kind, route)
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    s.metrics.request(route.name, c.request.method, m.ERROR)
    if kind is not Failure.UNSENT:
        s.metrics.unknown_outcomes.labels(route.name, route.on_unknown_outcome).inc()
        log.warning(
            "route %s: outcome unknown (%s): %s", route.name, kind, detail,
            extra=event_fields(Event.UNKNOWN_OUTCOME, route.name, failure=kind.value),
        )  # fmt: skip
        if route.reconcile is not None:
            found = await look_up(route.reconcile, c.request, c.client_key, s.upstreams.tls)
            lookup = on_lookup(found.status, route.reconcile)
            s.metrics.reconciled.labels(route.name, lookup).inc()
            log.warning("route %s: reconciled: %s (lookup %s)", route.name, lookup, found.status)
            settle = after_lookup(lookup, kind, route)
            if settle is Settle.RECORD:
                return await record_found(s, c, route.reconcile, found)
    if settle is Settle.RELEASE:
        await release(s, route, c.record_key, c.token)
    elif settle is Settle.KEEP:
        await _keep(s, c)
    elif settle is Settle.RECORD_UNKNOWN:
        seen = str(failure_status(kind))
        extra = {"failure": kind, "detail": detail[:500], "seen": seen}
        if await record_unknown(s, c, extra) is Kept.IN_MEMORY:
            return None
        return OUTCOME_UNKNOWN.answer()
    if kind is Failure.UNSENT:
        log.warning("route %s: upstream unreachable: %s", route.name, detail)
    return upstream_failure(kind)


async def record_unknown(s: Services, c: Claimed, extra: dict[str, str]) -> Kept:
    """Store an UNKNOWN outcome for an operator: retries replay 502 until it is resolved."""
    record = Record(
        status=502,
        headers=[],
        size=0,
        sha256="",
        completed_at=time.time(),
        unknown=True,
        extra=extra,
    )
    return await store_outcome(s, c, record, b"")


async def _keep(s: Services, c: Claimed) -> None:
    """`keep`: retries get 409 for one more lease, then the key is free (it ends with the
    lease rather than outliving it: this owner lives, and chose to let a retry run then)."""
    try:
        await s.store.extend(c.record_key, c.token, c.route.lease, 0.0)
    except StoreUnavailable as exc:
        s.metrics.redis_errors.inc()
        log.error("route %s: the kept key could not be renewed: %s", c.route.name, exc)


async def record_found(
    s: Services, c: Claimed, config: Reconcile, found: Found
) -> web.Response | None:
    """Record what the lookup found as the key's answer, and answer the client with it.

    The lookup's body (the resource as the upstream has it now) with its Content-Type, under
    the status the route names: not the lookup's own status and headers, which answer a GET,
    not the call that ran. It is marked, for this client and every replay, as reconciled,
    and this first answer is written as its replays are (no `Server` of aiohttp's, the
    record's `Idempotency-Expires`)."""
    headers = [("Content-Type", found.content_type)] if found.content_type else []
    headers.append(("Idempotency-Outcome", "reconciled"))
    route = c.route
    async with BodyRecorder(
        s.blobs, route.inline_max, route.max_recorded_body, len(found.body)
    ) as recorder:
        await recorder.feed(found.body)
        recorded = await recorder.finish()
    reason = HTTPStatus(config.status).phrase
    kept = await record_answer(s, c, config.status, reason, headers, recorded, lease_lost=False)
    if kept is Kept.IN_MEMORY:
        return None
    extra = expires(route.retention)
    if kept is Kept.FENCED:
        extra = {**extra, **FENCED}  # another claim's answer is the record
    return whole_answer(config.status, reason, headers, found.body, extra)
