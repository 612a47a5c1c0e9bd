"""The idempotency decisions as pure functions over plain values: no I/O, tested on their own.

The route's settings come in through the small protocols below, so the decisions know nothing
of how a config is read.
"""

from __future__ import annotations

from enum import Enum, StrEnum
from typing import Final, Protocol

from gateway.core.claims import Claim, ClaimResult


class Action(Enum):
    FORWARD = "forward"  # we own the key: call the upstream
    REPLAY = "replay"  # answer the recorded response
    REPLAY_UNKNOWN = "replay_unknown"  # answer 502 Idempotency-Outcome: unknown
    WAIT = "wait"  # in flight elsewhere: wait for it (on_in_flight: wait)
    FOLLOW = "follow"  # in flight elsewhere: follow its answer as it is made (on_in_flight: follow)
    CONFLICT = "conflict"  # in flight elsewhere: 409
    # The request waited for ended without a record (released, or its lease ran out): 409,
    # the key given back. A waiting duplicate never runs the call itself: only a retry does.
    UNRECORDED = "unrecorded"
    MISMATCH = "mismatch"  # same key, other payload: 422
    # Its owner stopped renewing the lease after it may have sent: an unknown outcome, never
    # a free key. TAKE_OVER: this request owns the key now and settles it by the route's
    # `on_owner_lost` (`owner_lost_step`); OWNER_LOST: the route keeps such keys: 409.
    TAKE_OVER = "take_over"
    OWNER_LOST = "owner_lost"


class Settle(Enum):
    """What happens to an owned key once the upstream call is over."""

    RECORD = "record"  # store the answer for replays
    RELEASE = "release"  # delete the claim: a retry runs again
    KEEP = "keep"  # leave it PENDING until the lease ends
    RECORD_UNKNOWN = "record_unknown"  # store an UNKNOWN outcome for an operator


class Failure(StrEnum):
    """What went wrong talking to the upstream, which decides what happens to the key."""

    UNSENT = "unsent"  # the request never left: a retry is safe
    TIMEOUT = "timeout"  # sent, no complete answer in time: outcome unknown
    BROKEN = "broken"  # sent, connection reset or answer cut: outcome unknown


class StatusRule(Protocol):
    def records(self, status: int) -> bool: ...


class Policy(Protocol):
    """What the decisions read of a route."""

    @property
    def on_in_flight(self) -> str: ...
    @property
    def on_unknown_outcome(self) -> str: ...
    @property
    def owner_lost(self) -> str: ...
    @property
    def record(self) -> StatusRule: ...


def records(rules: tuple[str, ...], status: int) -> bool:
    """Whether `rules` (classes like "2xx", codes like "201", exclusions like "!429") record
    `status`; an exclusion wins."""
    code = str(status)
    if f"!{code}" in rules:
        return False
    return code in rules or f"{code[0]}xx" in rules


def on_claim(result: ClaimResult, policy: Policy, may_wait: bool, waited: bool = False) -> Action:
    """What to do with the answer of the claim script; `waited` after waiting for another
    request with the key (`on_in_flight: wait`, or following it: `follow`)."""
    outcome = result.outcome  # the two answers of nearly every request first: new, replay
    if outcome is Claim.CLAIMED:
        return Action.UNRECORDED if waited else Action.FORWARD
    if outcome is Claim.DONE:
        assert result.record is not None
        return Action.REPLAY_UNKNOWN if result.record.unknown else Action.REPLAY
    if outcome is Claim.UNSENT:
        return Action.UNRECORDED if waited else Action.FORWARD
    if outcome is Claim.TAKEN:  # a waiting duplicate lets it go: only a retry settles
        return Action.OWNER_LOST if waited else Action.TAKE_OVER
    if outcome is Claim.LOST:
        return Action.OWNER_LOST
    if outcome is Claim.MISMATCH:
        return Action.MISMATCH
    assert outcome is Claim.IN_FLIGHT
    if not may_wait:
        return Action.CONFLICT
    return _ON_IN_FLIGHT.get(policy.on_in_flight, Action.CONFLICT)


_ON_IN_FLIGHT: Final = {"wait": Action.WAIT, "follow": Action.FOLLOW}


def on_answer(status: int, policy: Policy) -> Settle:
    """After a complete upstream answer: record it, or release so a retry runs again."""
    return Settle.RECORD if policy.record.records(status) else Settle.RELEASE


_ON_UNKNOWN: Final = {
    "release": Settle.RELEASE,
    "keep": Settle.KEEP,
    "record": Settle.RECORD_UNKNOWN,
}


def on_failure(kind: Failure, policy: Policy) -> Settle:
    """After the upstream call failed: unsent is safe to retry; otherwise the route decides."""
    if kind is Failure.UNSENT:
        return Settle.RELEASE
    return _ON_UNKNOWN[policy.on_unknown_outcome]


class Lookup(StrEnum):
    """What a reconcile lookup said about a call whose outcome was unknown."""

    HAPPENED = "happened"  # the upstream ran it: record what the lookup found
    NOT_HAPPENED = "not_happened"  # it did not: release the key so a retry runs
    UNCLEAR = "unclear"  # no answer, or one the route does not map: on_unknown_outcome


class LookupRule(Protocol):
    """What the decision reads of a route's `reconcile` settings."""

    @property
    def happened(self) -> tuple[int, ...]: ...
    @property
    def not_happened(self) -> tuple[int, ...]: ...


def on_lookup(status: int | None, rule: LookupRule) -> Lookup:
    """Read the lookup's status (None: it gave no usable answer) by the route's mapping."""
    if status in rule.happened:
        return Lookup.HAPPENED
    if status in rule.not_happened:
        return Lookup.NOT_HAPPENED
    return Lookup.UNCLEAR


def after_lookup(found: Lookup, kind: Failure, policy: Policy) -> Settle:
    """What happens to the key once the lookup answered."""
    if found is Lookup.HAPPENED:
        return Settle.RECORD
    if found is Lookup.NOT_HAPPENED:
        return Settle.RELEASE
    return on_failure(kind, policy)


class LostStep(StrEnum):
    """What a request that took over a lost owner's key does with it; the values name the
    resolution in the metric and the access log."""

    LOOK_UP = "look_up"  # ask the route's reconcile lookup first
    RECONCILED = "reconciled"  # it ran: record and answer what the lookup found
    NOT_HAPPENED = "not_happened"  # it did not run: forward it now
    RERUN = "rerun"  # `release`: forward it again (at least once)
    HELD = "held"  # `record`: an UNKNOWN outcome for an operator; retries get 502
    KEPT = "kept"  # `keep`: 409 until the key's hold ends
    UNSENT = "unsent"  # never sent (the route marks sends): it ran as a new key
    LATE_ANSWER = "late_answer"  # its owner, cut off from Redis, stored its answer: replayed


def hold_lost(policy: Policy, reconciles: bool) -> bool:
    """Whether the claim leaves a lost owner's key as it is (409) rather than taking it over:
    only `keep` with no lookup to ask."""
    return policy.owner_lost == "keep" and not reconciles


_ON_LOST: Final = {"release": LostStep.RERUN, "keep": LostStep.KEPT, "record": LostStep.HELD}


def owner_lost_step(policy: Policy, reconciles: bool, found: Lookup | None = None) -> LostStep:
    """What to do with a key taken over from a lost owner: ask the lookup where there is one
    (`found` None: not asked yet), else, or when it cannot tell, the route's `on_owner_lost`."""
    if reconciles and found is None:
        return LostStep.LOOK_UP
    if found is Lookup.HAPPENED:
        return LostStep.RECONCILED
    if found is Lookup.NOT_HAPPENED:
        return LostStep.NOT_HAPPENED
    return _ON_LOST[policy.owner_lost]


def may_still_send(elapsed: float, lease: float) -> bool:
    """Whether a call whose lease began `elapsed` seconds ago may still go upstream: only
    within the first half of the lease. A gateway stalled longer (stopped, swapped out) may
    have been taken for a lost owner meanwhile, and a retry may have run the call; the half
    left covers the bytes' way to the upstream and Redis's clock running ahead of ours."""
    return elapsed < lease / 2


def failure_status(kind: Failure) -> int:
    return 504 if kind is Failure.TIMEOUT else 502


def may_evict(policies: set[str]) -> bool:
    """Whether a Redis with these `maxmemory-policy` values may drop our keys: anything but
    `noeviction`. The `volatile-*` policies count too: every record and lease has a TTL."""
    return any(policy != "noeviction" for policy in policies)
