"""The idempotency decisions as pure functions: no I/O, unit-tested on their own."""

from __future__ import annotations

from enum import Enum

from gateway.config.settings import Policy
from gateway.store.store import Claim, ClaimResult
from gateway.upstream.proxy import TIMEOUT, UNSENT


class Action(Enum):
    FORWARD = "forward"  # we own the key: call the upstream
    REPLAY = "replay"  # answer the recorded response
    REPLAY_UNKNOWN = "replay_unknown"  # answer 502 Idempotency-Outcome: unknown
    WAIT = "wait"  # in flight elsewhere: wait for it (on_in_flight: wait)
    CONFLICT = "conflict"  # in flight elsewhere: 409
    MISMATCH = "mismatch"  # same key, other payload: 422


class Settle(Enum):
    """What happens to an owned key once the upstream call is over."""

    RECORD = "record"  # store the answer for replays
    RELEASE = "release"  # delete the claim: a retry runs again
    KEEP = "keep"  # leave it PENDING until the lease ends
    RECORD_UNKNOWN = "record_unknown"  # store an UNKNOWN outcome for an operator


def on_claim(result: ClaimResult, policy: Policy, may_wait: bool) -> Action:
    """What to do with the answer of the claim script."""
    if result.outcome is Claim.CLAIMED:
        return Action.FORWARD
    if result.outcome is Claim.MISMATCH:
        return Action.MISMATCH
    if result.outcome is Claim.IN_FLIGHT:
        return Action.WAIT if policy.on_in_flight == "wait" and may_wait else Action.CONFLICT
    assert result.record is not None
    return Action.REPLAY_UNKNOWN if result.record.unknown else Action.REPLAY


def on_answer(status: int, policy: Policy) -> Settle:
    """After a complete upstream answer: record it, or release so a retry runs again."""
    return Settle.RECORD if policy.record.records(status) else Settle.RELEASE


def on_failure(kind: str, policy: Policy) -> Settle:
    """After the upstream call failed: unsent is safe to retry; otherwise the route decides."""
    if kind == UNSENT:
        return Settle.RELEASE
    return {
        "release": Settle.RELEASE,
        "keep": Settle.KEEP,
        "record": Settle.RECORD_UNKNOWN,
    }[policy.on_unknown_outcome]


def failure_status(kind: str) -> int:
    return 504 if kind == TIMEOUT else 502
