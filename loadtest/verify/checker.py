"""The checker: reads the client history and the execution log and applies six rules.

1. executions per key (route, tenant, key): at most one; on a `release` route each extra
   one must be explained (its owner gateway was killed or paused; the gateway answered an
   unknown outcome; the upstream reset or hung after executing), never "unexplained";
2. every 2xx for a key carries the same body, that of an execution of the key;
3. no 2xx from another key's, tenant's or payload's execution;
4. no execution of a key after a client got a 2xx for it, and no "unknown outcome" answer
   for it either (no acknowledged outcome lost);
5. availability: the share of attempts answered 2xx or an expected 409/422/503, per second;
6. no 500 to any client, no traceback and no 500 in any gateway's log, clean exits.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadtest.verify.history import CUT, REFUSED, TIMED_OUT, Attempt, Execution, Fault

Key = tuple[str, str, str]  # route, tenant, key
EXPECTED = frozenset({409, 422, 503})  # answers a real client retries or expects
OWNER_FAULTS = ("gateway-kill", "gateway-stop")
FAILOVER_FAULTS = ("redis-kill", "redis-stop", "redis-failover", "redis-migrate")
STATUS_500 = re.compile(r'"status": ?500\b|\bstatus=500\b')


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
    violations: list[Violation] = field(default_factory=list)
    # Per second since the start: attempts answered 2xx or as expected, 2xx, all.
    per_second: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    began: float = 0.0
    span: float = 0.0  # from the first attempt's start to the last one's end
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
) -> Verdict:
    """`policies`: each route's policy for an unknown outcome (record, reconcile, release);
    `owner_lost`: for a key whose owner died (the gateway's `on_owner_lost`), the same
    unless given."""
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
    verdict.keys = len(asked)
    for key in asked.keys() | runs.keys():
        ran = sorted(runs.get(key, ()), key=lambda e: e.time)
        answered = [a for a in asked.get(key, ()) if a.status > 0]
        if answered and max(answered, key=lambda a: a.end).outcome == "unknown":
            verdict.held_unknown += 1
            verdict.unknown_causes[unknown_cause(ran, asked.get(key, []), faults)] += 1
        verdict.runs_per_key[len(ran)] += 1
        check_key(verdict, key, ran, asked.get(key, []), by_id, faults, accepts)
    availability(verdict, attempts)
    check_logs(verdict, logs, exit_codes)
    return verdict


def check_key(
    verdict: Verdict,
    key: Key,
    ran: list[Execution],
    asked: list[Attempt],
    by_id: dict[str, Execution],
    faults: Sequence[Fault],
    accepts: dict[str, tuple[bool, bool]],
) -> None:
    name = "/".join(key)
    # Rule 1: executions per key.
    unknown_released, owner_lost_released = accepts.get(key[0], (False, False))
    for extra in ran[1:]:
        cause = explain(extra, ran, asked, faults)
        if cause is not None and (
            (cause.startswith("unknown outcome") and unknown_released)
            or (cause.startswith("owner lost") and owner_lost_released)
        ):
            verdict.explained[cause] += 1
        else:
            why = cause or "unexplained"
            verdict.violations.append(Violation(1, name, f"executed {len(ran)} times ({why})"))
            break
    # Rules 2 and 3: every 2xx carries the body of this key's execution, one body for all.
    acked = [a for a in asked if 200 <= a.status < 300]
    bodies = {a.body for a in acked}
    if len(bodies) > 1:
        verdict.violations.append(Violation(2, name, f"{len(bodies)} different 2xx bodies"))
    for attempt in acked:
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
    # Rule 4: nothing runs, and no answer says "unknown", after a client was told it ran.
    if acked and ran:
        first_ack = min(a.end for a in acked)
        late = [e for e in ran if e.time > first_ack]
        if late:
            why = explain(late[0], ran, asked, faults) or "unexplained"
            after = late[0].time - first_ack
            verdict.violations.append(
                Violation(4, name, f"ran again {after:.3f}s after a 2xx ({why})")
            )
        forgot = [a for a in asked if a.start > first_ack and a.outcome == "unknown"]
        if forgot:
            after = forgot[0].start - first_ack
            verdict.violations.append(
                Violation(4, name, f"answered unknown {after:.3f}s after a 2xx")
            )


def explain(
    extra: Execution, ran: list[Execution], asked: list[Attempt], faults: Sequence[Fault]
) -> str | None:
    """Why the key ran once more, when a cause the policy accepts is in the history."""
    caused_by = next((a for a in asked if a.attempt == extra.attempt), None)
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


def availability(verdict: Verdict, attempts: Sequence[Attempt]) -> None:
    if not attempts:
        return
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
