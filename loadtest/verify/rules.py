"""The checker's rules, one function each: a key's history (`causes.KeyHistory`) or the run's
counts in, the violations out, each with its `Reason` (docs/verification.md numbers them).

Rule 5 (availability) is a measure, not a verdict: `checker.availability`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadtest.verify.causes import Context, ExtraRun, Key, KeyHistory, explain, fault_near
from loadtest.verify.gatewaylog import Gateways
from loadtest.verify.history import CUT, REFUSED, TIMED_OUT, Attempt, Execution, Fault
from loadtest.verify.reasons import Reason

NOT_NOW = frozenset({409, 503})  # after a 2xx: "come back later", no other outcome


@dataclass(frozen=True)
class Violation:
    reason: Reason
    key: str  # route/tenant/key, or "-" (the run), or "gateway N"
    detail: str = ""  # what this case adds to the reason's words

    @property
    def rule(self) -> int:
        return self.reason.rule

    @property
    def what(self) -> str:
        return f"{self.reason.words}: {self.detail}" if self.detail else self.reason.words


def status_name(status: int) -> str:
    return {REFUSED: "refused", CUT: "cut", TIMED_OUT: "timeout"}.get(status, str(status))


def rule_1(k: KeyHistory, extras: Sequence[ExtraRun], ctx: Context) -> list[Violation]:
    """Executions per key: one, and an extra one only with a cause its route accepts (the
    earlier release's known defect is counted apart). One violation per key."""
    for extra in extras:
        if extra.apart or ctx.routes.accepts(k.key[0], extra.cause):
            continue
        what = f"{len(k.ran)} times ({extra.cause.words}{extra.detail})"
        return [Violation(Reason.RAN_MORE_THAN_ONCE, k.name, what)]
    return []


def acknowledged(k: KeyHistory) -> list[Attempt]:
    """The key's 2xx answers of its claims (a call forwarded beside them answers apart)."""
    return [a for a in k.asked if 200 <= a.status < 300 and a.attempt not in k.degraded.beside]


def rule_2(k: KeyHistory, ctx: Context) -> list[Violation]:
    """One body: every 2xx of the key's claims the same, each that of its execution; one
    that broke off after its head (a follower cut short, say) carries the first bytes of
    its execution's body, as the upstream logged them."""
    found = []
    bodies = {a.body for a in acknowledged(k)}
    if len(bodies) > 1:
        found.append(Violation(Reason.BODIES_DIFFER, k.name, f"{len(bodies)} bodies"))
    for attempt in k.asked:
        if not 200 <= attempt.status < 300:
            continue
        execution = ctx.by_id.get(attempt.execution)
        if execution is None:
            found.append(Violation(Reason.NAMES_NO_EXECUTION, k.name, attempt.attempt))
        elif (_of_key(execution), execution.payload) != (k.key, attempt.payload):
            continue  # another's answer: rule 3's
        elif execution.body != attempt.body:
            found.append(Violation(Reason.DIFFERS_FROM_ITS_EXECUTION, k.name, attempt.attempt))
    for attempt in k.asked:
        cut = attempt.broke_off
        if cut is not None and 200 <= cut[0] < 300:
            found += _cut_short(k, ctx, attempt, cut[1])
    return found


def _cut_short(k: KeyHistory, ctx: Context, attempt: Attempt, length: int) -> list[Violation]:
    """An answer cut short after a 2xx head: its bytes the start of the execution they name,
    or, naming none yet, of one of the key's executions."""
    what = f"{attempt.attempt}, {length} bytes"
    if attempt.execution:
        execution = ctx.by_id.get(attempt.execution)
        if execution is None:
            return [Violation(Reason.NAMES_NO_EXECUTION, k.name, what)]
        if (_of_key(execution), execution.payload) != (k.key, attempt.payload):
            return []  # another's answer: rule 3's
        if execution.starts_with(length, attempt.body) is False:
            return [Violation(Reason.CUT_NOT_ITS_START, k.name, f"{what} of {execution.execution}")]
        return []
    if not length:
        return []
    starts = [e.starts_with(length, attempt.body) for e in k.ran]
    if True in starts or (starts and None in starts):  # its start, or bytes not logged
        return []
    return [Violation(Reason.CUT_NOT_ITS_START, k.name, f"{what}, of none of its executions")]


def rule_3(k: KeyHistory, ctx: Context) -> list[Violation]:
    """No answer of another key, tenant or payload: a 2xx's execution (whole, or cut short
    after its head) ran for this key and this payload."""
    found = []
    for attempt in k.asked:
        execution = ctx.by_id.get(attempt.execution) if attempt.answered_2xx else None
        if execution is None:
            continue
        if _of_key(execution) != k.key:
            other = "/".join(_of_key(execution))
            cut = " (cut short after its head)" if attempt.broke_off else ""
            detail = f"{attempt.attempt} carries {other}'s{cut}"
            found.append(Violation(Reason.ANOTHER_KEYS_ANSWER, k.name, detail))
        elif execution.payload != attempt.payload:
            found.append(Violation(Reason.ANOTHER_PAYLOADS_ANSWER, k.name, attempt.attempt))
    return found


def _of_key(execution: Execution) -> Key:
    return execution.route, execution.tenant, execution.key


def rule_4(
    k: KeyHistory, extras: Sequence[ExtraRun], ctx: Context, grace: float
) -> list[Violation]:
    """No acknowledged outcome lost: once a client got a 2xx, no claim of the key runs, and
    every later answer for its payload is that 2xx (rules 2 and 10 hold body and head), or
    a "not now" (`not_now`). One violation of each kind per key."""
    acked = acknowledged(k)
    if not acked:
        return []
    found = []
    first = min(a.end for a in acked)
    causes = {extra.execution.execution: extra for extra in extras}
    late = [e for e in k.claimed if e.time > first]
    if late:
        extra = causes.get(late[0].execution)
        why = f"{extra.cause.words}{extra.detail}" if extra else explain(late[0], k, ctx).words
        what = f"{late[0].time - first:.3f}s after it ({why})"
        found.append(Violation(Reason.RAN_AFTER_A_2XX, k.name, what))
    paid = {a.payload for a in acked}
    for attempt in sorted(k.asked, key=lambda a: a.start):
        if attempt.start <= first or attempt.payload not in paid:
            continue
        if attempt.attempt in k.degraded.forwarded:  # never claimed: not held to the record
            continue
        if 200 <= attempt.status < 300 or not_now(attempt, first, ctx.faults, grace):
            continue
        after = f"{attempt.start - first:.3f}s after it ({attempt.attempt})"
        if attempt.status in (CUT, TIMED_OUT):
            waited = f"{status_name(attempt.status)} after {attempt.end - attempt.start:.1f} s"
            found.append(Violation(Reason.NO_ANSWER_AFTER_A_2XX, k.name, f"{waited}, {after}"))
        else:
            told = f"{attempt.status} {attempt.outcome or attempt.code}".strip()
            found.append(Violation(Reason.OTHER_ANSWER_AFTER_A_2XX, k.name, f"{told}, {after}"))
        break
    return found


def not_now(attempt: Attempt, first_ack: float, faults: Sequence[Fault], grace: float) -> bool:
    """An answer after a 2xx that only says "later": a 503 while Redis is down, a 409 while
    the outcome is being stored (journaled while Redis refuses it, say: within `grace` of
    the 2xx, or with a fault near), a connection refused (nothing sent), or none at all
    (cut, timed out) with a fault near.

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
    return attempt.start - first_ack <= grace or fault_near(attempt, faults)


def rule_7(k: KeyHistory) -> list[Violation]:
    """The same payload is never refused as another: a 422 only where another payload was
    sent with the key (by any client) before the refused attempt ended."""
    for attempt in k.asked:
        if attempt.status == 422 and not any(
            other.payload != attempt.payload and other.start < attempt.end for other in k.asked
        ):
            return [Violation(Reason.SAME_PAYLOAD_REFUSED, k.name, attempt.attempt)]
    return []


def rule_10(k: KeyHistory) -> list[Violation]:
    """A replay is the first answer: every later 2xx carries the first one's status line and
    head, and so does a replay cut short after its head (a follower whose answer broke off)
    that of the first 2xx of its execution. A stale owner's answer marked `fenced` says that
    the record holds another claim's, and is held to rule 2 only. On a route that follows,
    a 2xx says whether it is a replay: marked (`Idempotent-Replayed`) exactly when another
    attempt ran its execution."""
    heads = sorted((a for a in acknowledged(k) if a.outcome != "fenced"), key=lambda a: a.end)
    found = _other_head(heads[0], heads[1:], k) if heads else []
    cut = [a for a in k.asked if a.replayed and a.broke_off and a.answered_2xx]
    for attempt in cut:
        first = next((a for a in heads if a.execution == attempt.execution), None)
        if first is not None and not found:
            found = _other_head(first, [attempt], k)
    if k.follows:
        found += _marked_otherwise(k)
    return found


def _other_head(first: Attempt, later: Sequence[Attempt], k: KeyHistory) -> list[Violation]:
    for attempt in later:
        status = attempt.status if attempt.broke_off is None else attempt.broke_off[0]
        if (status, attempt.reason) != (first.status, first.reason):
            what = (
                f"{attempt.attempt} is {status} {attempt.reason} where the first 2xx "
                f"({first.attempt}) was {first.status} {first.reason}"
            )
            return [Violation(Reason.OTHER_STATUS_LINE, k.name, what)]
        if attempt.head != first.head:
            what = f"{attempt.attempt}, against the first 2xx ({first.attempt})"
            return [Violation(Reason.OTHER_HEADERS, k.name, what)]
    return []


def _marked_otherwise(k: KeyHistory) -> list[Violation]:
    """The first 2xx (whole or cut short) of the key whose replay mark says otherwise than
    its execution: a replay unmarked, or the answer of the attempt that ran it marked."""
    ran = {e.execution: e for e in k.ran}
    for attempt in sorted(k.asked, key=lambda a: a.start):
        execution = ran.get(attempt.execution) if attempt.answered_2xx else None
        if execution is None:
            continue
        replay = execution.attempt != attempt.attempt
        if replay != (attempt.replayed == "true"):
            said = f"marked {attempt.replayed!r}" if attempt.replayed else "unmarked"
            whose = f"{execution.attempt}'s" if replay else "its own"
            what = f"{attempt.attempt}, {said}, carries {whose} execution {execution.execution}"
            return [Violation(Reason.MARKED_OTHERWISE, k.name, what)]
    return []


def rule_6(answered_500: int, gateways: Gateways) -> list[Violation]:
    """No 500: no client got one, no gateway's log holds a traceback or an access line of
    status 500, every gateway exited 0 at the final SIGTERM."""
    found = []
    if answered_500:
        found.append(Violation(Reason.ANSWERED_500, "-", f"{answered_500}"))
    if gateways.tracebacks:
        found.append(Violation(Reason.TRACEBACK_LOGGED, "-", f"{gateways.tracebacks}"))
    if gateways.logged_500:
        found.append(Violation(Reason.LOGGED_500, "-", f"{gateways.logged_500}"))
    for index, code in enumerate(gateways.exit_codes):
        if code != 0:
            found.append(Violation(Reason.UNCLEAN_EXIT, f"gateway {index}", f"exit code {code}"))
    return found


def rule_8(
    quiet_2xx: tuple[int, int], executions: int, span: float, share: float, rate: float
) -> list[Violation]:
    """Liveness: at least `share` of the attempts with no fault on (nor AFTER_FAULT after
    one) got a 2xx, and at least `rate` executions per second ran over the run."""
    found = []
    ok, quiet = quiet_2xx
    if quiet and ok / quiet < share:
        what = f"{ok / quiet:.1%} of the {quiet:,} attempts with no fault on (floor {share:.0%})"
        found.append(Violation(Reason.FEW_2XX, "-", what))
    ran = executions / max(span, 1e-9)
    if ran < rate:
        what = f"{executions:,} in {span:.0f} s ({ran:.1f}/s, floor {rate:g}/s)"
        found.append(Violation(Reason.FEW_EXECUTIONS, "-", what))
    return found


def rule_9(untrusted: Sequence[str]) -> list[Violation]:
    """The run can be trusted: what the harness found wrong with it, each a violation."""
    return [Violation(Reason.UNTRUSTED, "-", what) for what in untrusted]
