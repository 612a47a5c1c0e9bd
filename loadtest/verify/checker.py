"""The checker: reads the client history, the execution log, the faults and what the gateways
logged, applies the rules (`rules`, one function each) and merges what they find into one
`Verdict`, with the counts the report shows.

1. executions per key (route, tenant, key): at most one; an extra one only with a cause its
   route's policy accepts (`causes`: on a `release` route a lost owner run again as its
   gateway logged, an unknown outcome released; on a `fail_mode: open` route a call
   forwarded without idempotency while Redis was unreachable from its gateway);
2. every 2xx for a key carries the same body, that of an execution of the key, byte for
   byte as the upstream logged it; one cut short after its head, the first bytes of it;
3. no 2xx (whole or cut short) from another key's, tenant's or payload's execution;
4. no acknowledged outcome lost: after a client got a 2xx for a key, no claim of it runs,
   and every later answer for the same payload is that 2xx, or only says "not now";
5. availability: the share of attempts answered 2xx or an expected 409/422/503, per second;
6. no 500 to any client, no traceback and no 500 in any gateway's log, clean exits;
7. the same payload is never refused as another: a 422 only where another payload was sent
   with the key before it;
8. liveness: with no fault on, most attempts are answered 2xx, and executions run at a
   minimum rate (a gateway that forwards nothing fails, however "available");
9. the run itself can be trusted: every client process exited 0, every history line was
   read, and every fault asked for was made;
10. a replay is the first answer: every later 2xx for a key carries the first 2xx's status
   code, reason phrase and headers (bytes, order, repeats, less those the gateway adds:
   `clients.head_digest`), not only its body; on a route that follows, a 2xx is marked a
   replay exactly when another attempt ran its execution.

A follower (`on_in_flight: follow`) is a replay that arrived early: rules 2, 3 and 10 hold
its answer as they hold a replay's, whole or cut short after its head (2: its bytes the
start of its execution's; 3: of this key's; 10: its head the first 2xx's).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gateway.telemetry.events import Event
from loadtest.verify.causes import (
    AFTER_FAULT,
    OWNER_FAULTS,
    Context,
    Key,
    KeyHistory,
    Routes,
    extra_runs,
)
from loadtest.verify.gatewaylog import Gateways
from loadtest.verify.history import Attempt, Execution, Fault
from loadtest.verify.reasons import Cause, Reason
from loadtest.verify.rules import (
    Violation,
    rule_1,
    rule_2,
    rule_3,
    rule_4,
    rule_6,
    rule_7,
    rule_8,
    rule_9,
    rule_10,
    status_name,
)

EXPECTED = frozenset({409, 422, 503})  # answers a real client retries or expects


@dataclass(frozen=True)
class Floor:
    """Rule 8's floor: with no fault on (nor for AFTER_FAULT seconds after one), at least
    `share_2xx` of the attempts answered 2xx, and `rate` executions per second in all."""

    share_2xx: float = 0.5
    rate: float = 5.0
    grace: float = 4.0  # rule 4: seconds after a key's first 2xx that a 409 may still come


@dataclass
class Verdict:
    attempts: int = 0
    keys: int = 0
    executions: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # Idempotency-Outcome values
    runs_per_key: Counter[int] = field(default_factory=Counter)
    explained: Counter[Cause] = field(default_factory=Counter)  # extra runs accepted, by cause
    degraded: int = 0  # attempts answered Idempotency-Degraded (forwarded without a claim)
    # The earlier release's known defect, in a mixed fleet: runs it forwarded without
    # idempotency right after it stood still (fixed in this one). Reported apart, not
    # violations.
    earlier_stalls: list[Violation] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    # What the gateways logged they did (their `event` lines), and how they settled lost
    # owners' keys (the `settled` of `owner-lost`).
    said: Counter[Event] = field(default_factory=Counter)
    settled: Counter[str] = field(default_factory=Counter)
    said_followed: int = 0  # answers the access logs say followed one in flight
    # Per second since the start: attempts answered 2xx or as expected, 2xx, all.
    per_second: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    began: float = 0.0
    span: float = 0.0  # from the first attempt's start to the last one's end
    quiet_2xx: tuple[int, int] = (0, 0)  # attempts with no fault on: 2xx, all
    held_unknown: int = 0  # keys whose last answer was an unknown outcome (for an operator)
    unknown_causes: Counter[str] = field(default_factory=Counter)
    # The followers (attempts of kind `follow`) by how they ended (`follower_end`), and
    # those of them whose owner's gateway was killed or stopped while they were on.
    followers: Counter[str] = field(default_factory=Counter)
    followers_owner_down: Counter[str] = field(default_factory=Counter)

    @property
    def availability(self) -> float:
        good = sum(g for g, _, _ in self.per_second.values())
        return good / max(1, sum(n for _, _, n in self.per_second.values()))

    def count(self, rule: int) -> int:
        return sum(1 for v in self.violations if v.rule == rule)


def check(
    attempts: Sequence[Attempt],
    executions: Iterable[Execution],
    faults: Sequence[Fault],
    routes: Routes,
    gateways: Gateways | None = None,
    floor: Floor | None = None,
    untrusted: Sequence[str] = (),
) -> Verdict:
    """`routes`: their policies, leases and fail modes; `gateways`: what they logged and how
    they exited; `floor`: rule 8's, checked only if given (a handmade history is short);
    `untrusted`: what the harness found wrong with the run itself (rule 9)."""
    gateways = gateways or Gateways()
    verdict = Verdict(
        attempts=len(attempts), said=gateways.counts, settled=gateways.settled,
        said_followed=gateways.followed,
    )  # fmt: skip
    runs: dict[Key, list[Execution]] = defaultdict(list)
    by_id: dict[str, Execution] = {}
    for execution in executions:
        runs[(execution.route, execution.tenant, execution.key)].append(execution)
        by_id[execution.execution] = execution
    verdict.executions = len(by_id)
    asked: dict[Key, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        asked[(attempt.route, attempt.tenant, attempt.key)].append(attempt)
        verdict.statuses[status_name(attempt.status)] += 1
        if attempt.outcome:
            verdict.outcomes[attempt.outcome] += 1
        if attempt.degraded:
            verdict.degraded += 1
    verdict.keys = len(asked)
    ctx = Context(faults, by_id, gateways, routes)
    grace = (floor or Floor()).grace
    for key in asked.keys() | runs.keys():
        k = KeyHistory(key, runs.get(key, ()), asked.get(key, ()), ctx)
        tally_key(verdict, k, faults)
        extras = extra_runs(k, ctx)
        for extra in extras:
            if extra.apart:
                what = f"{extra.cause.words}{extra.detail}"
                verdict.earlier_stalls.append(Violation(Reason.RAN_MORE_THAN_ONCE, k.name, what))
            elif routes.accepts(key[0], extra.cause):
                verdict.explained[extra.cause] += 1
        verdict.violations += [
            *rule_1(k, extras, ctx), *rule_2(k, ctx), *rule_3(k, ctx),
            *rule_4(k, extras, ctx, grace), *rule_7(k), *rule_10(k),
        ]  # fmt: skip
    availability(verdict, attempts, faults)
    verdict.violations += rule_6(verdict.statuses.get("500", 0), gateways)
    if floor is not None:
        verdict.violations += rule_8(
            verdict.quiet_2xx, verdict.executions, verdict.span, floor.share_2xx, floor.rate
        )
    verdict.violations += rule_9(untrusted)
    return verdict


def tally_key(verdict: Verdict, k: KeyHistory, faults: Sequence[Fault]) -> None:
    """The key's counts: its executions, whether it is held unknown and after what, and how
    its followers ended."""
    verdict.runs_per_key[len(k.ran)] += 1
    answered = [a for a in k.asked if a.status > 0]
    if answered and max(answered, key=lambda a: a.end).outcome == "unknown":
        verdict.held_unknown += 1
        verdict.unknown_causes[unknown_cause(k, faults)] += 1
    owner = k.attempts.get(k.ran[0].attempt) if k.ran else None
    for attempt in k.asked:
        if attempt.kind != FOLLOWER:
            continue
        how = follower_end(attempt)
        verdict.followers[how] += 1
        if owner is not None and any(
            fault.kind in OWNER_FAULTS
            and fault.target == f"gateway {owner.gateway}"
            and fault.start <= attempt.end
            and fault.end >= attempt.start
            for fault in faults
        ):
            verdict.followers_owner_down[how] += 1


FOLLOWER = "follow"  # the kind of a client's attempt sent while the key's answer streams


def follower_end(attempt: Attempt) -> str:
    """How a follower ended: `streamed` (a 2xx marked a replay, sent chunked as it was
    made), `from the record` (marked, framed by length: it waited, or came once the answer
    was stored), `unmarked` (a 2xx not marked a replay: rule 10's), `cut after the head` or
    `timeout after the head`, or the status it got (`409`, `cut`, ...)."""
    if 200 <= attempt.status < 300:
        if attempt.replayed != "true":
            return "unmarked"
        return "streamed" if attempt.framing == "chunked" else "from the record"
    if attempt.broke_off is not None:
        return f"{status_name(attempt.status)} after the head"
    return status_name(attempt.status)


def unknown_cause(k: KeyHistory, faults: Sequence[Fault]) -> str:
    """What a key held unknown went through: the faults on its attempts, if any."""
    if any(e.fault for e in k.ran):
        return "the upstream reset or hung after executing"
    on = sorted(
        {
            fault.kind
            for attempt in k.asked
            for fault in faults
            if fault.start <= attempt.end and fault.end >= attempt.start and hits(fault, attempt)
        }
    )
    return f"during {', '.join(on)}" if on else "no fault on its attempts"


def hits(fault: Fault, attempt: Attempt) -> bool:
    """Whether the fault touched the attempt's gateway (`gateway N`, `gateway N <-> ...`)."""
    if fault.target.startswith("gateway "):
        return fault.target.split()[1] == str(attempt.gateway)
    return True


def availability(
    verdict: Verdict, attempts: Sequence[Attempt], faults: Sequence[Fault] = ()
) -> None:
    """Rule 5's measure: per second, the attempts answered 2xx or as expected; and rule 8's
    input, the attempts with no fault on (nor AFTER_FAULT after one) and their 2xx."""
    if not attempts:
        return
    quiet = [
        a
        for a in attempts
        if not any(f.start <= a.end and f.end + AFTER_FAULT >= a.start for f in faults)
    ]
    verdict.quiet_2xx = (sum(1 for a in quiet if 200 <= a.status < 300), len(quiet))
    began = min(a.start for a in attempts)
    verdict.began = began
    verdict.span = max(a.end for a in attempts) - began
    tally: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0])
    for attempt in attempts:
        second = tally[int(attempt.start - began)]
        second[2] += 1
        if 200 <= attempt.status < 300:
            second[0] += 1
            second[1] += 1
        elif attempt.status in EXPECTED:
            second[0] += 1
    verdict.per_second = {s: (g, ok, n) for s, (g, ok, n) in sorted(tally.items())}
