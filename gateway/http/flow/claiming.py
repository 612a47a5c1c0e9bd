"""Taking a request's key: the claim, a record an earlier version stored under its own
fingerprint of the request, and waiting for the request in flight (`on_in_flight: wait`)."""

from __future__ import annotations

from collections.abc import Awaitable

from gateway.config.policy import Route
from gateway.core.backoff import GIVE_BACK, IN_FLIGHT_WAIT
from gateway.core.claims import Claim, ClaimResult
from gateway.core.decision import Action, on_claim
from gateway.core.fingerprint import Fields, earlier_fingerprint, fingerprint
from gateway.errors import StoreUnavailable
from gateway.http.flow.context import Services
from gateway.http.flow.pacing import Pacing
from gateway.store.store import Store

# What the fingerprint covers: method, raw path, raw query, the configured headers, the body.
Payload = tuple[str, str, str, Fields, bytes]


async def take(
    s: Services,
    route: Route,
    names: tuple[str, str],
    token: str,
    payload: Payload,
    may_wait: bool,
) -> tuple[ClaimResult, Action, str]:
    """Claim the record `names` name (format 1's and format 2's: `core.keys.record_names`)
    for this request: what the claim found (its `key`, the name that holds it), what to do,
    and the fingerprint the key is held under."""
    fp = fingerprint(route.fingerprint, *payload)
    names = s.store.ordered(names)
    result = await claim(s, route, names, fp, token)
    if result.outcome is Claim.MISMATCH:  # or a record an earlier version stored
        earlier = earlier_fingerprint(route.fingerprint, *payload)
        if earlier is not None and earlier != fp:
            again = await claim(s, route, names, earlier, token)
            if again.outcome is Claim.CLAIMED:  # the key went meanwhile: held under today's
                await s.store.release(again.key, token)
                result = await claim(s, route, names, fp, token)
            elif again.outcome is not Claim.MISMATCH:
                result, fp = again, earlier
    action = on_claim(result, route, may_wait)
    if action is Action.WAIT:
        result = await wait_out(s, result, names, fp, token, route)
        action = on_claim(result, route, may_wait=False, waited=True)
    return result, action, fp


async def give_back(store: Store, rkey: str, token: str, lease: float) -> None:
    """Release a claim whose reply timed out, as soon as Redis answers (for a short while,
    within the lease): nothing was sent, and a key left claimed would be taken for a lost
    owner's after it. A Redis that stays away leaves it so: held, never run unasked."""
    pacing = Pacing(GIVE_BACK, min(lease, GIVE_BACK.within))
    while True:
        try:
            await store.release(rkey, token)
            return
        except StoreUnavailable:
            if not await pacing.pause():
                return  # the lease ends: the key is a lost owner's, never run unasked


def claim(
    s: Services, route: Route, names: tuple[str, str], fp: str, token: str
) -> Awaitable[ClaimResult]:
    """The claim as `route` makes it, made under `names[0]` unless `names[1]` holds the key
    (`Store.claim`): a PENDING key outlives its lease by the retention, so that a lost
    owner's key is never taken for a free one."""
    return s.spans.claim(
        s.store.claim(
            names[0],
            fp,
            token,
            route.lease,
            route.retention,
            take_lost=not route.holds_lost_keys,
            mark_sent=route.mark_sent,
            other=names[1],
        )
    )


async def wait_out(
    s: Services,
    result: ClaimResult,
    names: tuple[str, str],
    fp: str,
    token: str,
    route: Route,
) -> ClaimResult:
    """Ask again, pausing as IN_FLIGHT_WAIT says, until the first request ends or the
    route's `in_flight_wait` runs out.

    Asking is claiming: if the first one ended without a record, we hold the key, and
    `on_claim(..., waited=True)` says to give it back rather than run the call.
    """
    pacing = Pacing(IN_FLIGHT_WAIT, route.in_flight_wait)
    while await pacing.pause():
        result = await claim(s, route, names, fp, token)
        if result.outcome is not Claim.IN_FLIGHT:
            return result
    return result
