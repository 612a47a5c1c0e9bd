"""A key whose owner stopped renewing its lease after it may have sent the request (a gateway
killed or frozen mid-call): an unknown outcome, never a free key.

The request that found it owns it now (the claim took it over). It first waits a little for
the owner's own answer (`late_answer`): an owner cut off from Redis rather than gone (a
failover, a cut link) may have answered its client from the journal, and stores that answer
the moment Redis takes it. Then it settles the key as the route's `on_owner_lost` says,
asking the `reconcile` lookup first where there is one: what happened is recorded, what did
not happen runs, and what nobody can tell is held for an operator, kept (409) or, with
`release`, run again and counted.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from aiohttp import web

from gateway.core.backoff import LATE_ANSWER
from gateway.core.claims import Claim, ClaimResult
from gateway.core.decision import LostStep, on_lookup, owner_lost_step
from gateway.errors import RecordCorrupt, StoreUnavailable
from gateway.http.answers.problems import (
    IN_FLIGHT,
    OWNER_LOST,
    OWNER_LOST_KEPT,
    STORE_UNAVAILABLE,
)
from gateway.http.answers.replay import unreadable_record
from gateway.http.flow.claiming import claim
from gateway.http.flow.context import Claimed, Services
from gateway.http.flow.flag import note_held
from gateway.http.flow.forward import forward
from gateway.http.flow.heartbeat import Heartbeat
from gateway.http.flow.pacing import Pacing
from gateway.http.flow.reconcile import Found, look_up
from gateway.http.flow.settle import Kept, record_found, record_unknown
from gateway.telemetry import metrics as m
from gateway.telemetry.events import Event, event_fields
from gateway.telemetry.requestlog import note_owner_lost

log = logging.getLogger(__name__)

# The Idempotency-Outcome of an answer forwarded after its owner was lost.
RAN_AGAIN: Final = {LostStep.RERUN: "rerun", LostStep.NOT_HAPPENED: "not-happened"}


def owner_lost(s: Services, c: Claimed, resolution: LostStep) -> None:
    """Count and log how a lost owner's key was settled."""
    route = c.route.name
    s.metrics.owner_lost.labels(route, resolution).inc()
    note_owner_lost(resolution)
    log.warning(
        "route %s: a key's owner was lost (lease ended unrenewed): %s", route, resolution,
        extra=event_fields(Event.OWNER_LOST, route, settled=resolution.value),
    )  # fmt: skip


async def late_answer(s: Services, c: Claimed) -> ClaimResult | None:
    """The key as another left it while this request waited up to `late_answer_wait` for its
    lost owner's answer: DONE (that answer, as a rule), or IN_FLIGHT or MISMATCH (another
    request's now); None when the key is still this request's to settle as a lost owner's.

    Asking again is claiming again with this request's token, which renews its lease. A
    Redis error is asked again until the wait ends: a failover is when such answers are due.
    A record that cannot be read raises RecordCorrupt (answered so, never run again)."""
    names = (c.record_key, c.record_key)  # asked under the one name that holds it
    pacing = Pacing(LATE_ANSWER, c.route.late_answer_wait)
    while await pacing.pause():
        asked = time.monotonic()
        try:
            result = await claim(s, c.route, names, c.fingerprint, c.token)
        except StoreUnavailable:
            s.metrics.redis_errors.inc()
            continue
        if result.outcome is Claim.TAKEN:
            c.leased_at, c.lost = asked, result.lost  # renewed: the lease runs from here
            continue
        if result.outcome in (Claim.CLAIMED, Claim.UNSENT):
            # The key went meanwhile (evicted, purged, lost in a failover) and this ask made
            # it anew: still a lost owner's call that may have run, never a new one. The
            # script marked it unsent where the route marks sends, as `forward` expects.
            c.leased_at, c.unsent = asked, c.route.mark_sent
            return None
        if result.outcome is Claim.DONE:
            owner_lost(s, c, LostStep.LATE_ANSWER)
        return result
    return None


async def settle_lost(s: Services, c: Claimed) -> web.StreamResponse | ClaimResult:
    """The answer for a key this request took over from a lost owner; or the key as another
    left it while this request waited for that owner's answer (`late_answer`), to act on."""
    try:
        late = await late_answer(s, c)
    except RecordCorrupt as corrupt:
        return unreadable_record(s.metrics, c.request, c.route, corrupt)
    return await take_over(s, c) if late is None else late


def lost_conflict() -> web.Response:
    """409 for a key held as its lost owner left it (`keep`)."""
    return OWNER_LOST_KEPT.answer()


async def let_go(s: Services, c: Claimed) -> None:
    """Give the key back as a lost owner's: its lease over, kept for the retention."""
    try:
        await s.store.extend(c.record_key, c.token, 0.0, c.route.retention)
    except StoreUnavailable as exc:  # its lease ends by itself, a lost owner's all the same
        s.metrics.redis_errors.inc()
        log.error("route %s: a taken-over key could not be let go: %s", c.route.name, exc)


async def take_over(s: Services, c: Claimed) -> web.StreamResponse:
    """Settle a key this request took over from a lost owner, and answer the client."""
    route = c.route
    step = owner_lost_step(route, route.reconcile is not None)
    found = Found(None)
    if step is LostStep.LOOK_UP:
        assert route.reconcile is not None
        found = await _look_up(s, c)
        lookup = on_lookup(found.status, route.reconcile)
        s.metrics.reconciled.labels(route.name, lookup).inc()
        step = owner_lost_step(route, True, lookup)
    owner_lost(s, c, step)
    if step is LostStep.NOT_HAPPENED and not await _still_owned(s, c):
        # The lease lapsed during the lookup: another request may hold the key and run it.
        s.metrics.request(route.name, c.request.method, m.CONFLICT)
        return IN_FLIGHT.answer()
    if step in RAN_AGAIN:
        c.outcome = RAN_AGAIN[step]  # this answer alone says it: a replay is the upstream's
        return await forward(s, c)
    s.metrics.request(route.name, c.request.method, _COUNTED_AS[step])
    if step in (LostStep.HELD, LostStep.KEPT):  # the key waits for a person: the console lists it
        await note_held(s, c)
    if step is LostStep.RECONCILED:
        assert route.reconcile is not None
        answer = await record_found(s, c, route.reconcile, found)
        return answer if answer is not None else _not_stored_yet()
    if step is LostStep.HELD:
        extra = {"failure": "owner-lost", "detail": "lease ended unrenewed", "seen": "502"}
        if await record_unknown(s, c, extra) is Kept.IN_MEMORY:
            return _not_stored_yet()
        return OWNER_LOST.answer()
    await let_go(s, c)  # KEPT
    return lost_conflict()


# The request outcome each settled step counts as: the answer of the call that ran, a 502,
# or a 409.
_COUNTED_AS: Final = {
    LostStep.RECONCILED: m.REPLAYED,
    LostStep.HELD: m.ERROR,
    LostStep.KEPT: m.CONFLICT,
}


async def _look_up(s: Services, c: Claimed) -> Found:
    """Ask the route's lookup, the lease renewed meanwhile (a lookup may wait `after`)."""
    route = c.route
    assert route.reconcile is not None
    beat = Heartbeat(s.store, c.record_key, c.token, route.lease, route.retention, s.metrics)
    beat.start()
    try:
        return await look_up(route.reconcile, c.request, c.client_key, s.upstreams.tls)
    finally:
        beat.stop()


async def _still_owned(s: Services, c: Claimed) -> bool:
    """Renew the lease once more before sending (its new start in `c.leased_at`): False when
    the key is another's now (or Redis cannot say), so that nothing is sent."""
    c.leased_at = time.monotonic()
    try:
        return await s.store.extend(c.record_key, c.token, c.route.lease, c.route.retention)
    except StoreUnavailable:
        s.metrics.redis_errors.inc()
        return False


def _not_stored_yet() -> web.Response:
    """The settled outcome is being stored in the background: the retry gets it."""
    return STORE_UNAVAILABLE.answer("the outcome of this key is being stored; retry later")
