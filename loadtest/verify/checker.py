"""The checker: reads the client history and the execution log and applies ten rules.

1. executions per key (route, tenant, key): at most one; on a `release` route each extra
   one must be explained (its owner gateway was killed or paused; the gateway answered an
   unknown outcome; the upstream reset or hung after executing), never "unexplained"; on a
   `fail_mode: open` route, a call the gateway forwarded without idempotency (answered
   `Idempotency-Degraded`) while Redis was cut off from it, or while its gateway logged
   that the route failed open (Redis slower than its socket timeout, its circuit open) with
   no stall of its own just before, is no claim's, and runs beside them (`degraded`); one
   forwarded so right after its gateway stood still is a violation, or, on a gateway of
   the earlier release in a mixed fleet, that release's known defect, counted apart;
2. every 2xx for a key carries the same body, that of an execution of the key;
3. no 2xx from another key's, tenant's or payload's execution;
4. no acknowledged outcome lost: after a client got a 2xx for a key, no execution of it
   starts, and every later answer for the same payload is that 2xx (rules 2 and 10 hold
   its body and head); only "not now" answers are excepted: a 503 while Redis is down, a
   409 while the outcome is being stored (within a grace after the 2xx, or while a fault
   is on), a refused connection; a later attempt cut or timed out gets no answer, and is
   excepted only while a fault is on (or was, AFTER_FAULT seconds before it);
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
   `clients.head_digest`), not only its body.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from loadtest.verify.history import CUT, REFUSED, TIMED_OUT, Attempt, Execution, Fault

Key = tuple[str, str, str]  # route, tenant, key
EXPECTED = frozenset({409, 422, 503})  # answers a real client retries or expects
OWNER_FAULTS = ("gateway-kill", "gateway-stop")
FAILOVER_FAULTS = ("redis-kill", "redis-stop", "redis-failover", "redis-migrate")
STATUS_500 = re.compile(r'"status": ?500\b|\bstatus=500\b')
NOT_NOW = frozenset({409, 503})  # after a 2xx: "come back later", no other outcome
AFTER_FAULT = 2.0  # seconds after a fault during which its effects still count as "on"
# A fault's target when it hit one gateway's link to Redis alone (the journal-full fault
# resets that link too, where there is one).
REDIS_LINK = re.compile(r"\bgateway (\d+) <-> redis\b")
DEGRADED = "degraded: forwarded without idempotency while Redis was cut off (fail_mode: open)"
DEGRADED_LOGGED = (
    "degraded: forwarded without idempotency, its gateway logged failing open with no fault "
    "on (a Redis call timed out, or its circuit was open)"
)
STOOD_STILL = "forwarded without idempotency after its gateway stood still"
# After these a gateway's Redis timeouts and breaker say nothing of Redis (its timers ran
# out while it stood still), and what it held may have been retried elsewhere meanwhile.
STILL_FAULTS = (*OWNER_FAULTS, "gateway-stall")
LEASE = 2.0  # seconds: a route's lease where none is given (the harness's default)
# What a gateway logs as a route forwards without idempotency (`http.flow.handler`).
FAILS_OPEN = re.compile(r"redis unavailable, route (\S+) fails open: ")
LOG_SLACK = 0.05  # seconds: a log's times are cut to the millisecond
# A forward reaches the upstream within the routes' upstream timeout after its log line.
FORWARD_WITHIN = 1.0
# The nemesis notes a wake just after its SIGCONT: the woken gateway may log before that.
WAKE_SLACK = 0.5


class LogLine(NamedTuple):
    """One line of a gateway's JSON log: when (wall clock, as the histories) and what."""

    time: float
    msg: str


class Gateways:
    """What the gateways said and were, beside the histories: when each (by index) logged
    that a route failed open, and which run the earlier release (a mixed fleet)."""

    def __init__(
        self, lines: Mapping[int, Iterable[LogLine]] | None = None, earlier: Collection[int] = ()
    ) -> None:
        self.fails_open: dict[tuple[int, str], list[float]] = defaultdict(list)
        for gateway, logged in (lines or {}).items():
            for line in logged:
                said = FAILS_OPEN.match(line.msg)
                if said is not None:
                    self.fails_open[(gateway, said.group(1))].append(line.time)
        for times in self.fails_open.values():
            times.sort()
        self.earlier = frozenset(earlier)

    def failed_open(self, gateway: int, route: str, start: float, end: float) -> bool:
        """Whether the gateway logged the route failing open between start and end."""
        times = self.fails_open.get((gateway, route), [])
        first = bisect_left(times, start - LOG_SLACK)
        return first < len(times) and times[first] <= end + LOG_SLACK


@dataclass(frozen=True)
class Floor:
    """Rule 8's floor: with no fault on (nor for AFTER_FAULT seconds after one), at least
    `share_2xx` of the attempts answered 2xx, and `rate` executions per second in all."""

    share_2xx: float = 0.5
    rate: float = 5.0
    grace: float = 4.0  # rule 4: seconds after a key's first 2xx that a 409 may still come


@dataclass
class Violation:
    rule: int
    key: str
    what: str


@dataclass
class Verdict:
    attempts: int = 0
    keys: int = 0
    executions: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)  # Idempotency-Outcome values
    runs_per_key: Counter[int] = field(default_factory=Counter)
    explained: Counter[str] = field(default_factory=Counter)  # extra runs, by cause
    degraded: int = 0  # attempts answered Idempotency-Degraded (forwarded without a claim)
    # The earlier release's known defect, in a mixed fleet: runs it forwarded without
    # idempotency right after it stood still (fixed in this one). Reported apart, not
    # violations.
    earlier_stalls: list[Violation] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    # Per second since the start: attempts answered 2xx or as expected, 2xx, all.
    per_second: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    began: float = 0.0
    span: float = 0.0  # from the first attempt's start to the last one's end
    quiet_2xx: tuple[int, int] = (0, 0)  # attempts with no fault on: 2xx, all
    held_unknown: int = 0  # keys whose last answer was an unknown outcome (for an operator)
    unknown_causes: Counter[str] = field(default_factory=Counter)

    @property
    def availability(self) -> float:
        good = sum(g for g, _, _ in self.per_second.values())
        return good / max(1, sum(n for _, _, n in self.per_second.values()))

    def count(self, rule: int) -> int:
        return sum(1 for v in self.violations if v.rule == rule)


def status_name(status: int) -> str:
    return {REFUSED: "refused", CUT: "cut", TIMED_OUT: "timeout"}.get(status, str(status))


def check(
    attempts: Sequence[Attempt],
    executions: Iterable[Execution],
    faults: Sequence[Fault],
    policies: dict[str, str],
    logs: Iterable[str] = (),
    exit_codes: Sequence[int] = (),
    owner_lost: dict[str, str] | None = None,
    floor: Floor | None = None,
    untrusted: Sequence[str] = (),
    fails_open: Collection[str] = (),
    gateways: Gateways | None = None,
    leases: Mapping[str, float] | None = None,
) -> Verdict:
    """`policies`: each route's policy for an unknown outcome (record, reconcile, release);
    `owner_lost`: for a key whose owner died (the gateway's `on_owner_lost`), the same
    unless given; `floor`: rule 8's, checked only if given (a handmade history is short);
    `untrusted`: what the harness found wrong with the run itself (rule 9); `fails_open`:
    the routes with `fail_mode: open`; `gateways`: their logs' fail-open lines and the
    earlier release's among them; `leases`: each route's lease in seconds (LEASE unless
    given)."""
    accepts = {
        route: (policy == "release", (owner_lost or policies).get(route, policy) == "release")
        for route, policy in policies.items()
    }
    verdict = Verdict(attempts=len(attempts))
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
    for key in asked.keys() | runs.keys():
        ran = sorted(runs.get(key, ()), key=lambda e: e.time)
        answered = [a for a in asked.get(key, ()) if a.status > 0]
        if answered and max(answered, key=lambda a: a.end).outcome == "unknown":
            verdict.held_unknown += 1
            verdict.unknown_causes[unknown_cause(ran, asked.get(key, []), faults)] += 1
        verdict.runs_per_key[len(ran)] += 1
        if key[0] in fails_open:
            lease = (leases or {}).get(key[0], LEASE)
            judged = Degraded(asked.get(key, []), ran, faults, gateways or Gateways(), lease)
        else:
            judged = Degraded()
        check_key(
            verdict, key, ran, asked.get(key, []), by_id, faults, accepts, floor or Floor(),
            judged,
        )  # fmt: skip
    availability(verdict, attempts, faults)
    check_logs(verdict, logs, exit_codes)
    if floor is not None:
        check_liveness(verdict, floor)
    verdict.violations += [Violation(9, "-", what) for what in untrusted]
    return verdict


def check_key(
    verdict: Verdict,
    key: Key,
    ran: list[Execution],
    asked: list[Attempt],
    by_id: dict[str, Execution],
    faults: Sequence[Fault],
    accepts: dict[str, tuple[bool, bool]],
    floor: Floor,
    judged: Degraded | None = None,
) -> None:
    name = "/".join(key)
    # A call forwarded without idempotency while Redis was unreachable from its gateway is
    # none of the key's claims: it runs beside them, its answer is recorded nowhere, and no
    # later answer is held to it (`Degraded`: only on a route that fails open).
    judged = judged or Degraded()
    degraded = judged.beside
    # Rule 1: executions per key.
    unknown_released, owner_lost_released = accepts.get(key[0], (False, False))
    claimed = [e for e in ran if e.attempt not in degraded]
    # The first run of a key is no extra one.
    for extra in [e for e in ran if e.attempt in degraded][0 if claimed else 1 :]:
        cause = degraded[extra.attempt]
        if cause is None:
            verdict.earlier_stalls.append(Violation(1, name, judged.apart[extra.attempt]))
        else:
            verdict.explained[cause] += 1
    for extra in (claimed or ran[:1])[1:]:
        cause = judged.wrong.get(extra.attempt) or explain(extra, ran, asked, faults)
        if cause is not None and (
            (cause.startswith("unknown outcome") and unknown_released)
            or (cause.startswith("owner lost") and owner_lost_released)
        ):
            verdict.explained[cause] += 1
        else:
            why = cause or "unexplained"
            verdict.violations.append(Violation(1, name, f"executed {len(ran)} times ({why})"))
            break
    # Rules 2 and 3: every 2xx carries the body of this key's execution, one body for all
    # (a degraded one its own execution's).
    answered = [a for a in asked if 200 <= a.status < 300]
    acked = [a for a in answered if a.attempt not in degraded]
    bodies = {a.body for a in acked}
    if len(bodies) > 1:
        verdict.violations.append(Violation(2, name, f"{len(bodies)} different 2xx bodies"))
    for attempt in answered:
        execution = by_id.get(attempt.execution)
        if execution is None:
            verdict.violations.append(
                Violation(2, name, f"a 2xx ({attempt.attempt}) names no execution")
            )
        elif (execution.route, execution.tenant, execution.key) != key:
            other = f"{execution.route}/{execution.tenant}/{execution.key}"
            verdict.violations.append(
                Violation(3, name, f"a 2xx ({attempt.attempt}) carries {other}'s answer")
            )
        elif execution.payload != attempt.payload:
            verdict.violations.append(
                Violation(3, name, f"a 2xx ({attempt.attempt}) answers another payload")
            )
        elif execution.body != attempt.body:
            verdict.violations.append(
                Violation(2, name, f"a 2xx ({attempt.attempt}) differs from its execution")
            )
    # Rule 4: nothing runs, and every later answer for the payload is the 2xx, once a
    # client was told it ran.
    if acked:
        first_ack = min(a.end for a in acked)
        late = [e for e in claimed if e.time > first_ack]
        if late:
            why = judged.wrong.get(late[0].attempt) or explain(late[0], ran, asked, faults)
            why = why or "unexplained"
            after = late[0].time - first_ack
            verdict.violations.append(
                Violation(4, name, f"ran again {after:.3f}s after a 2xx ({why})")
            )
        paid = {a.payload for a in acked}
        for attempt in sorted(asked, key=lambda a: a.start):
            if attempt.start <= first_ack or attempt.payload not in paid:
                continue
            if attempt.attempt in degraded:  # never claimed: not held to the record
                continue
            if 200 <= attempt.status < 300 or not_now(attempt, first_ack, faults, floor):
                continue
            if attempt.status in (CUT, TIMED_OUT):
                waited = attempt.end - attempt.start
                verdict.violations.append(
                    Violation(
                        4,
                        name,
                        f"no answer ({status_name(attempt.status)} after {waited:.1f} s) "
                        f"{attempt.start - first_ack:.3f}s after a 2xx, with no fault on "
                        f"({attempt.attempt})",
                    )
                )
                break
            told = f"{attempt.status} {attempt.outcome or attempt.code}".strip()
            verdict.violations.append(
                Violation(
                    4,
                    name,
                    f"answered {told} {attempt.start - first_ack:.3f}s after a 2xx "
                    f"({attempt.attempt})",
                )
            )
            break
    check_replays(verdict, name, acked)  # rule 10
    # Rule 7: a 422 only where another payload was sent with the key before it.
    for attempt in asked:
        if attempt.status == 422 and not any(
            other.payload != attempt.payload and other.start < attempt.end for other in asked
        ):
            verdict.violations.append(
                Violation(7, name, f"the same payload refused as another ({attempt.attempt})")
            )
            break


def check_replays(verdict: Verdict, name: str, acked: list[Attempt]) -> None:
    """Rule 10: every later 2xx is the first one's status line and head, not only its body.
    A stale owner's answer marked `fenced` says that the record holds another claim's."""
    heads = sorted((a for a in acked if a.outcome != "fenced"), key=lambda a: a.end)
    if not heads:
        return
    first = heads[0]
    for attempt in heads[1:]:
        if (attempt.status, attempt.reason) != (first.status, first.reason):
            what = (
                f"a replay ({attempt.attempt}) is {attempt.status} {attempt.reason} where the "
                f"first 2xx ({first.attempt}) was {first.status} {first.reason}"
            )
        elif attempt.head != first.head:
            what = (
                f"a replay ({attempt.attempt}) has other headers than the first 2xx "
                f"({first.attempt})"
            )
        else:
            continue
        verdict.violations.append(Violation(10, name, what))
        return


def not_now(attempt: Attempt, first_ack: float, faults: Sequence[Fault], floor: Floor) -> bool:
    """An answer after a 2xx that only says "later": a 503 while Redis is down, a 409 while
    the outcome is being stored (journaled while Redis refuses it, say), a connection
    refused (nothing sent), or none at all (cut, timed out) while a fault is on.

    A replay is a claim and a read of the record: nothing in it waits long (the routes
    answer 409 to a key in flight, `on_in_flight: reject`) but a lost owner's key, whose
    late-answer wait, lookup and call follow a fault. Only a fault, then, makes a replay
    outlast the client's timeout or cuts it."""
    if attempt.status == REFUSED:
        return True
    if attempt.status in (CUT, TIMED_OUT):
        return fault_near(attempt, faults)
    if attempt.status not in NOT_NOW or attempt.outcome == "unknown":
        return False
    return attempt.start - first_ack <= floor.grace or fault_near(attempt, faults)


class Degraded:
    """A key's calls forwarded without idempotency on a route that fails open, judged for
    rule 1. `beside`: the attempts that ran beside the key's claims, each with its cause, or
    None for the earlier release's known defect (`apart` says what it did); `wrong`: those
    that are violations, and why.

    A call so answered (`Idempotency-Degraded`) runs beside the claims when Redis was
    unreachable from its gateway: a fault cut it off (`cuts_off_redis`), or the gateway
    logged that the route failed open during the attempt (a Redis call timed out, its
    circuit open: a loaded Redis is slower than the socket timeout with no fault on). Not
    right after the gateway stood still (stopped, killed, stalled: within the lease and
    AFTER_FAULT): its timers ran out while it slept, and its own breaker then says nothing
    of Redis. A call held through such a stall and forwarded, logged as failing open, after
    its client had given up is the same, though no attempt holds the marker."""

    def __init__(
        self,
        asked: Sequence[Attempt] = (),
        ran: Sequence[Execution] = (),
        faults: Sequence[Fault] = (),
        gateways: Gateways | None = None,
        lease: float = LEASE,
    ) -> None:
        self.beside: dict[str, str | None] = {}
        self.wrong: dict[str, str] = {}
        self.apart: dict[str, str] = {}
        self.gateways = gateways or Gateways()
        runs = {e.attempt: e for e in ran}
        for attempt in asked:
            run = runs.get(attempt.attempt)
            if attempt.degraded:
                self.marked(attempt, run, faults, lease)
            elif run is not None:
                self.unmarked(attempt, run, faults)

    def marked(
        self, attempt: Attempt, run: Execution | None, faults: Sequence[Fault], lease: float
    ) -> None:
        if any(cuts_off_redis(fault, attempt) for fault in faults):
            self.beside[attempt.attempt] = DEGRADED
            return
        said = self.gateways.failed_open
        if not said(attempt.gateway, attempt.route, attempt.start, attempt.end):
            return  # nothing says Redis was unreachable: `explain` names it
        still = next((f for f in faults if stood_still(f, attempt, lease)), None)
        if still is None:
            self.beside[attempt.attempt] = DEGRADED_LOGGED
        else:
            self.stood_still(attempt, run.time if run else attempt.start, still)

    def unmarked(self, attempt: Attempt, run: Execution, faults: Sequence[Fault]) -> None:
        """A call its client gave up on (or was cut from) during its gateway's stall, run
        after the gateway woke with the route failing open in its log just before."""
        for fault in faults:
            woke = fault.end - WAKE_SLACK
            if not (
                fault.kind in STILL_FAULTS
                and fault.target == f"gateway {attempt.gateway}"
                and fault.start <= attempt.end
                and attempt.start <= fault.end
                and run.time >= woke
            ):
                continue
            since = max(woke, run.time - FORWARD_WITHIN)
            if self.gateways.failed_open(attempt.gateway, attempt.route, since, run.time):
                self.stood_still(attempt, run.time, fault)
                return

    def stood_still(self, attempt: Attempt, ran_at: float, fault: Fault) -> None:
        what = (
            f"{STOOD_STILL} ({attempt.attempt}: {fault.kind} of {fault.target}, "
            f"{ran_at - fault.end:+.2f}s from its end)"
        )
        if attempt.gateway in self.gateways.earlier:
            self.beside[attempt.attempt] = None
            self.apart[attempt.attempt] = f"{what}: the earlier release's known defect"
        else:
            self.wrong[attempt.attempt] = what


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
    Redis killed, paused, full or failing over, its slots moving, or that gateway's own
    link to it black-holed, reset or slowed (the journal-full fault resets the link too)."""
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


def explain(
    extra: Execution, ran: list[Execution], asked: list[Attempt], faults: Sequence[Fault]
) -> str | None:
    """Why the key ran once more, when a cause the policy accepts is in the history."""
    caused_by = next((a for a in asked if a.attempt == extra.attempt), None)
    if caused_by is not None and caused_by.degraded:  # explained only by `Degraded`
        return (
            "forwarded without idempotency (Idempotency-Degraded) with Redis not cut off, "
            "and no fail-open in its gateway's log"
        )
    if caused_by is not None and caused_by.outcome == "rerun":
        return "owner lost: rerun announced (Idempotency-Outcome: rerun)"
    for attempt in asked:
        if attempt.start > extra.time:
            continue
        for fault in faults:
            if (
                fault.kind in OWNER_FAULTS
                and fault.target == f"gateway {attempt.gateway}"
                and fault.start <= max(attempt.end, extra.time)
                and fault.end >= attempt.start
            ):
                how = "killed" if fault.kind == "gateway-kill" else "paused"
                return f"owner lost: {fault.target} {how} mid-call"
    earlier = [e for e in ran if e.time < extra.time]
    if any(e.fault for e in earlier):
        return "unknown outcome released: the upstream reset or hung after executing"
    # Before a failover's cause: an earlier call of the key cut upstream, answered 502 or
    # 504 and released (not held unknown), is what a `release` route runs again after.
    for attempt in asked:
        if (
            attempt.status in (502, 504)
            and attempt.outcome != "unknown"
            and attempt.attempt != extra.attempt
            and attempt.end <= extra.time
            and any(e.attempt == attempt.attempt for e in earlier)
        ):
            return f"unknown outcome released: the gateway answered {attempt.status}"
    first = min(a.start for a in asked) if asked else extra.time
    for fault in faults:
        if (
            fault.kind in FAILOVER_FAULTS
            and "master" in fault.target
            and fault.start <= extra.time
            and fault.end >= first
        ):
            return f"a claim lost with a Redis master ({fault.kind}: asynchronous replication)"
    for attempt in asked:
        if attempt.start <= extra.time and (
            attempt.outcome == "unknown" or attempt.status in (502, 504)
        ):
            return f"unknown outcome released: the gateway answered {attempt.status}"
    return None


def unknown_cause(ran: list[Execution], asked: list[Attempt], faults: Sequence[Fault]) -> str:
    """What a key held unknown went through: the faults on its attempts, if any."""
    if any(e.fault for e in ran):
        return "the upstream reset or hung after executing"
    on = sorted(
        {
            fault.kind
            for attempt in asked
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


def check_liveness(verdict: Verdict, floor: Floor) -> None:
    ok, quiet = verdict.quiet_2xx
    if quiet and ok / quiet < floor.share_2xx:
        verdict.violations.append(
            Violation(
                8,
                "-",
                f"{ok / quiet:.1%} of the {quiet:,} attempts with no fault on got a "
                f"2xx (floor {floor.share_2xx:.0%})",
            )
        )
    rate = verdict.executions / max(verdict.span, 1e-9)
    if rate < floor.rate:
        verdict.violations.append(
            Violation(
                8,
                "-",
                f"{verdict.executions:,} executions in {verdict.span:.0f} s "
                f"({rate:.1f}/s, floor {floor.rate:g}/s)",
            )
        )


def check_logs(verdict: Verdict, logs: Iterable[str], exit_codes: Sequence[int]) -> None:
    fives = verdict.statuses.get("500", 0)
    if fives:
        verdict.violations.append(Violation(6, "-", f"{fives} answers with status 500"))
    for text in logs:
        if "Traceback" in text:
            verdict.violations.append(Violation(6, "-", "a traceback in a gateway's log"))
        if STATUS_500.search(text):
            verdict.violations.append(Violation(6, "-", "a 500 in a gateway's access log"))
    for index, code in enumerate(exit_codes):
        if code != 0:
            verdict.violations.append(
                Violation(6, f"gateway {index}", f"exit code {code} at the final SIGTERM")
            )


def read_logs(paths: Iterable[Path]) -> list[str]:
    return [path.read_text(errors="replace") for path in paths if path.exists()]


def log_lines(text: str) -> list[LogLine]:
    """A gateway's JSON log lines with their times (`{"ts": "...T23:14:20.363Z", "msg":
    ...}`, either release); other lines (a traceback, a child's stderr) are left out."""
    found = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
            ts, msg = entry["ts"], entry["msg"]
            whole, _, millis = ts.rstrip("Z").partition(".")
            when = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
            found.append(LogLine(when + int(millis or 0) / 1000, str(msg)))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return found
