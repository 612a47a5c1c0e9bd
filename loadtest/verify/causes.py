"""Why a key ran once more: each extra execution with its `Cause`, read from the history.

What a gateway did is taken from its log's events, matched to an attempt by its id (a call
forwarded without idempotency, a lost owner's key run again); a fault from the nemesis's
record, matched to an attempt by time: whether it was on, or ended AFTER_FAULT seconds
before (its effects outlast it: a breaker's reset, a reconnection, a lease running out). A
gateway that stood still is judged by the faults, not by its own word: its word is what a
stall would spoil. Only for the earlier release, whose log names no event, does a fault's
time stand for what its gateway did (a lost owner run again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from gateway.telemetry.events import Event
from loadtest.verify.gatewaylog import Gateways
from loadtest.verify.history import Attempt, Execution, Fault
from loadtest.verify.reasons import Accepts, Cause

Key = tuple[str, str, str]  # route, tenant, key
AFTER_FAULT = 2.0  # seconds after a fault during which its effects still count as "on"
LEASE = 2.0  # seconds: a route's lease where none is given (the harness's default)
OWNER_FAULTS = ("gateway-kill", "gateway-stop")
# After these a gateway's Redis timeouts and breaker say nothing of Redis (its timers ran
# out while it stood still), and what it held may have been retried elsewhere meanwhile.
STILL_FAULTS = (*OWNER_FAULTS, "gateway-stall")
FAILOVER_FAULTS = ("redis-kill", "redis-stop", "redis-failover", "redis-migrate")
# A fault's target when it hit one gateway's link to Redis alone (the journal-full fault
# resets that link too, where there is one). The nemesis names its targets so.
REDIS_LINK = re.compile(r"\bgateway (\d+) <-> redis\b")


@dataclass(frozen=True)
class Routes:
    """What the checker knows of the routes: each one's policy for an unknown outcome and
    for a lost owner (the same unless given), which fail open, their leases, and which let
    a duplicate follow the answer in flight (`on_in_flight: follow`)."""

    unknown: Mapping[str, str]
    lost: Mapping[str, str] = field(default_factory=dict)
    fails_open: frozenset[str] = frozenset()
    leases: Mapping[str, float] = field(default_factory=dict)
    follows: frozenset[str] = frozenset()

    def accepts(self, route: str, cause: Cause) -> bool:
        """Whether the route's policy lets an extra run of this cause stand."""
        if cause.accepts is Accepts.UNKNOWN_RELEASED:
            return self.unknown.get(route) == "release"
        if cause.accepts is Accepts.OWNER_LOST_RELEASED:
            return self.lost.get(route, self.unknown.get(route)) == "release"
        return cause.accepts is Accepts.FAILS_OPEN and route in self.fails_open

    def lease(self, route: str) -> float:
        return self.leases.get(route, LEASE)


@dataclass
class Context:
    """What the checker reads beside one key's history: the faults, every execution by id,
    what the gateways said, and the routes."""

    faults: Sequence[Fault]
    by_id: Mapping[str, Execution]
    gateways: Gateways
    routes: Routes


@dataclass(frozen=True)
class ExtraRun:
    """An execution of a key past its first, and why it ran (`detail`: the case's own)."""

    execution: Execution
    cause: Cause
    detail: str = ""
    apart: bool = False  # the earlier release's known defect: counted apart, no violation


class KeyHistory:
    """One key's part of the history: its executions in order, its attempts, and its calls
    forwarded without idempotency (`Degraded`, on a route that fails open)."""

    def __init__(
        self, key: Key, ran: Sequence[Execution], asked: Sequence[Attempt], ctx: Context
    ) -> None:
        self.key = key
        self.name = "/".join(key)
        self.ran = sorted(ran, key=lambda e: e.time)
        self.asked = list(asked)
        self.attempts = {a.attempt: a for a in asked}
        self.degraded = Degraded(self, ctx) if key[0] in ctx.routes.fails_open else Degraded()
        self.follows = key[0] in ctx.routes.follows  # its duplicates follow its answer

    @cached_property
    def claimed(self) -> list[Execution]:
        """The executions of the key's claims: all but those forwarded beside them."""
        return [e for e in self.ran if e.attempt not in self.degraded.beside]


class Degraded:
    """A key's calls forwarded without idempotency, judged for rule 1: `beside` the key's
    claims with their cause (`DEGRADED_CUT_OFF`, `DEGRADED_LOGGED`, or the earlier release's
    known defect), or `wrong`: a violation, with its cause and case.

    A call so forwarded is one its client was answered `Idempotency-Degraded` for, or one its
    gateway logged failing open for (its client gone: no answer came back). It runs beside
    the claims when Redis was unreachable from its gateway: a fault cut it off
    (`cuts_off_redis`), or the gateway logged that it failed open (a Redis call timed out,
    its circuit open: a loaded Redis is slower than the socket timeout with no fault on).
    Not right after the gateway stood still (stopped, killed, stalled: within the lease and
    AFTER_FAULT): its timers ran out while it slept, and its own breaker then says nothing
    of Redis. Nor with its client not told: its retry may run the call."""

    def __init__(self, k: KeyHistory | None = None, ctx: Context | None = None) -> None:
        self.beside: dict[str, Cause] = {}
        self.wrong: dict[str, tuple[Cause, str]] = {}
        self.apart: dict[str, str] = {}
        # Every attempt forwarded so, whatever rule 1 makes of it: not the claim's, so its
        # answer is not held to the record (a 502 the gateway made for it carries no mark).
        self.forwarded: set[str] = set()
        if k is None or ctx is None:
            return
        runs = {e.attempt: e for e in k.ran}
        for attempt in k.asked:
            run = runs.get(attempt.attempt)
            logged = failed_open(attempt, run, ctx)
            if attempt.degraded or logged:
                self.forwarded.add(attempt.attempt)
                self.judge(attempt, run, logged, ctx)

    def judge(self, attempt: Attempt, run: Execution | None, logged: bool, ctx: Context) -> None:
        if attempt.degraded and any(cuts_off_redis(fault, attempt) for fault in ctx.faults):
            self.beside[attempt.attempt] = Cause.DEGRADED_CUT_OFF
            return
        if not logged:
            return  # marked, with nothing that says Redis was unreachable: `explain` names it
        lease = ctx.routes.lease(attempt.route)
        still = next((f for f in ctx.faults if stood_still(f, attempt, lease)), None)
        if still is not None:
            ran_at = run.time if run else attempt.start
            what = (
                f" ({attempt.attempt}: {still.kind} of {still.target}, "
                f"{ran_at - still.ending:+.2f}s from its end)"
            )
            if attempt.gateway in ctx.gateways.earlier:
                self.beside[attempt.attempt] = Cause.DEGRADED_AFTER_STALL
                self.apart[attempt.attempt] = what + ": the earlier release's known defect"
            else:
                self.wrong[attempt.attempt] = (Cause.DEGRADED_AFTER_STALL, what)
        elif attempt.degraded:
            self.beside[attempt.attempt] = Cause.DEGRADED_LOGGED
        else:
            self.wrong[attempt.attempt] = (Cause.DEGRADED_UNTOLD, f" ({attempt.attempt})")


def failed_open(attempt: Attempt, run: Execution | None, ctx: Context) -> bool:
    """Whether the attempt's gateway logged that it forwarded the attempt without
    idempotency: by its id; the earlier release, which names no request, during the attempt
    (marked), or, for a call held through its stall whose client was gone (unmarked),
    between its wake and the call's run."""
    gateways = ctx.gateways
    if attempt.gateway not in gateways.earlier:
        return gateways.of(attempt.attempt, Event.FAILED_OPEN) is not None
    said = gateways.unnamed_between
    if attempt.degraded or (run is None and attempt.status >= 500):  # marked, or answered
        # by the gateway itself (upstream unreachable): nothing ran, and nothing says how
        return said(attempt.gateway, attempt.route, Event.FAILED_OPEN, attempt.start, attempt.end)
    if run is None:
        return False
    return any(
        fault.kind in STILL_FAULTS
        and fault.target == f"gateway {attempt.gateway}"
        and fault.start <= attempt.end
        and attempt.start <= fault.end
        and run.time >= fault.ending
        and said(attempt.gateway, attempt.route, Event.FAILED_OPEN, fault.ending, run.time)
        for fault in ctx.faults
    )


def extra_runs(k: KeyHistory, ctx: Context) -> list[ExtraRun]:
    """Each execution of the key past its first, with its cause: a call forwarded beside the
    claims by `Degraded`'s judgement, a claim's by `explain` (or `Degraded`'s, when it was
    forwarded so wrongly). The first run of a key is no extra one."""
    beside = [e for e in k.ran if e.attempt in k.degraded.beside]
    found = []
    for extra in beside[0 if k.claimed else 1 :]:
        apart = k.degraded.apart.get(extra.attempt)
        cause = k.degraded.beside[extra.attempt]
        found.append(ExtraRun(extra, cause, apart or "", apart is not None))
    for extra in (k.claimed or k.ran[:1])[1:]:
        cause, detail = k.degraded.wrong.get(extra.attempt) or (explain(extra, k, ctx), "")
        found.append(ExtraRun(extra, cause, detail))
    return found


def explain(extra: Execution, k: KeyHistory, ctx: Context) -> Cause:
    """Why a claimed call of the key ran once more."""
    caused_by = k.attempts.get(extra.attempt)
    if caused_by is not None and caused_by.degraded:  # beside the claims only by `Degraded`
        return Cause.DEGRADED_NOT_CUT_OFF
    settled = ctx.gateways.of(extra.attempt, Event.OWNER_LOST)
    if (settled is not None and settled.settled == "rerun") or (
        caused_by is not None and caused_by.outcome == "rerun"
    ):
        return Cause.OWNER_LOST_RERUN
    if settled is not None and settled.settled == "not_happened":
        return Cause.OWNER_LOST_NOT_HAPPENED
    earlier_release = caused_by is not None and caused_by.gateway in ctx.gateways.earlier
    if earlier_release and owner_stood_still(extra, k, ctx.faults):
        return Cause.OWNER_STOOD_STILL
    earlier = [e for e in k.ran if e.time < extra.time]
    if any(e.fault for e in earlier):
        return Cause.UPSTREAM_FAILED_AFTER
    if any(ctx.gateways.of(e.attempt, Event.UNKNOWN_OUTCOME) for e in earlier):
        return Cause.UNKNOWN_OUTCOME_LOGGED
    # Before a failover's cause: an earlier call of the key cut upstream, answered 502 or
    # 504 and released (not held unknown), is what a `release` route runs again after.
    ran_before = {e.attempt for e in earlier}
    for attempt in k.asked:
        if (
            attempt.status in (502, 504)
            and attempt.outcome != "unknown"
            and attempt.attempt != extra.attempt
            and attempt.end <= extra.time
            and attempt.attempt in ran_before
        ):
            return Cause.ANSWERED_502_504
    first = min(a.start for a in k.asked) if k.asked else extra.time
    for fault in ctx.faults:
        if (
            fault.kind in FAILOVER_FAULTS
            and "master" in fault.target
            and fault.start <= extra.time
            and fault.end >= first
        ):
            return Cause.MASTER_LOST
    for attempt in k.asked:
        if attempt.start <= extra.time and (
            attempt.outcome == "unknown" or attempt.status in (502, 504)
        ):
            return Cause.ANSWERED_502_504
    return Cause.UNEXPLAINED


def owner_stood_still(extra: Execution, k: KeyHistory, faults: Sequence[Fault]) -> bool:
    """Whether a gateway was killed or paused while one of the key's attempts before the run
    was on it (its owner, lost mid-call)."""
    return any(
        fault.kind in OWNER_FAULTS
        and fault.target == f"gateway {attempt.gateway}"
        and fault.start <= max(attempt.end, extra.time)
        and fault.end >= attempt.start
        for attempt in k.asked
        if attempt.start <= extra.time
        for fault in faults
    )


def stood_still(fault: Fault, attempt: Attempt, lease: float) -> bool:
    """Whether the attempt's gateway stood still (stopped, killed, stalled) during it or
    within the lease and AFTER_FAULT before it."""
    return (
        fault.kind in STILL_FAULTS
        and fault.target == f"gateway {attempt.gateway}"
        and fault.start <= attempt.end
        and fault.end + lease + AFTER_FAULT >= attempt.start
    )


def cuts_off_redis(fault: Fault, attempt: Attempt) -> bool:
    """Whether the fault cut the attempt's gateway off from Redis while the attempt ran (or
    AFTER_FAULT seconds before it, as the breaker and the reconnection take their time):
    Redis killed, paused, full or failing over, its slots moving, its replies held back, or
    that gateway's own link to it black-holed, reset, slowed or holding its replies (the
    journal-full fault resets the link too)."""
    if not fault.kind.startswith("redis-") and fault.kind != "journal-full":
        return False
    link = REDIS_LINK.search(fault.target)
    if link is not None and link.group(1) != str(attempt.gateway):
        return False
    if link is None and fault.kind == "journal-full":  # no link to cut: the disk alone
        return False
    return fault.start <= attempt.end and fault.end + AFTER_FAULT >= attempt.start


def fault_near(attempt: Attempt, faults: Sequence[Fault]) -> bool:
    """Whether a fault was on during the attempt, or ended AFTER_FAULT seconds before it."""
    return any(
        fault.start <= attempt.end and fault.end + AFTER_FAULT >= attempt.start for fault in faults
    )
