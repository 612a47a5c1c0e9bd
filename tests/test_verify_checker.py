"""The history checker of `loadtest.verify` on handmade histories: each rule alone, on a
history that breaks only it; then each kind of violation reported with its reason, and what
the policy allows counted by its cause, not reported. Verdicts are read by their `Reason`
and `Cause` members, never by a message's words."""

from __future__ import annotations

import base64

import pytest

from gateway.telemetry.events import Event
from loadtest.verify.causes import Context, KeyHistory, Routes, extra_runs
from loadtest.verify.checker import Floor, Verdict, check
from loadtest.verify.gatewaylog import Gateways, Said, read_gateways
from loadtest.verify.history import (
    CUT,
    REFUSED,
    TIMED_OUT,
    Attempt,
    Execution,
    Fault,
    digest,
)
from loadtest.verify.reasons import Cause, Reason
from loadtest.verify.rules import (
    rule_1,
    rule_2,
    rule_3,
    rule_4,
    rule_6,
    rule_7,
    rule_8,
    rule_9,
    rule_10,
)

NAMES = ("record", "reconcile", "release", "open", "follow")


def routes(
    lost: str | None = None, leases: dict[str, float] | None = None, fails_open: bool = True
) -> Routes:
    """The harness's routes, each named after its policy (`open` records and fails open,
    `follow` records and lets duplicates follow the answer in flight); every route's
    `on_owner_lost` is `lost` where given."""
    return Routes(
        unknown={name: name for name in NAMES},
        lost={name: lost or name for name in NAMES},
        fails_open=frozenset({"open"} if fails_open else ()),
        leases=leases or {},
        follows=frozenset({"follow"}),
    )


ROUTES = routes()


def attempt(
    n: int,
    status: int = 201,
    *,
    route: str = "record",
    tenant: str = "t0",
    key: str = "k1",
    payload: str = "p1",
    body: str = "b1",
    execution: str = "x1",
    start: float = 10.0,
    end: float = 10.1,
    gateway: int = 0,
    outcome: str = "",
    reason: str = "Created",
    head: str = "h1",
    degraded: str = "",
) -> Attempt:
    ok = 200 <= status < 300
    return Attempt(
        f"a{n}", "o1", "first", route, tenant, key, payload, gateway, start, end, status,
        outcome, body if ok else "", execution if ok else "", "", reason if ok else "",
        head if ok else "", degraded,
    )  # fmt: skip


def execution(
    n: int,
    *,
    route: str = "record",
    tenant: str = "t0",
    key: str = "k1",
    payload: str = "p1",
    at: float = 10.05,
    fault: str = "",
    caused_by: str = "a1",
) -> Execution:
    return Execution(f"x{n}", route, tenant, key, payload, caused_by, at, f"b{n}", fault)


def reasons(verdict: Verdict) -> list[Reason]:
    return sorted((v.reason for v in verdict.violations), key=lambda r: (r.rule, r.name))


def rules(verdict: Verdict) -> list[int]:
    return sorted(v.rule for v in verdict.violations)


def said(
    *events: tuple[int, float, Event, str | None], settled: str | None = None, route: str = "open"
) -> list[Said]:
    """Events the gateways logged: (gateway, time, event, the request it names)."""
    return [Said(gw, at, event, route, request, settled) for gw, at, event, request in events]


# Each rule alone: a history that breaks it and no other rule, as `check` sees it and as the
# rule's own function does.

KEY_RULES = {
    1: (
        [attempt(1, CUT, end=12.0), attempt(2, TIMED_OUT, start=13, end=16)],
        [execution(1), execution(2, at=13.05, caused_by="a2")],
        Reason.RAN_MORE_THAN_ONCE,
    ),
    2: ([attempt(1, body="tampered")], [execution(1)], Reason.DIFFERS_FROM_ITS_EXECUTION),
    3: (
        [attempt(1), attempt(2, tenant="t1", start=11, end=11.1)],  # t1 got t0's answer
        [execution(1)],
        Reason.ANOTHER_KEYS_ANSWER,
    ),
    4: (
        [attempt(1), attempt(2, 502, start=12, end=12.1, outcome="unknown")],
        [execution(1)],
        Reason.OTHER_ANSWER_AFTER_A_2XX,
    ),
    7: ([attempt(1, 422)], [], Reason.SAME_PAYLOAD_REFUSED),
    10: (
        [attempt(1), attempt(2, start=11, end=11.1, head="h2")],  # the body intact, a header gone
        [execution(1)],
        Reason.OTHER_HEADERS,
    ),
}


def key_rules(history: list[Attempt], ran: list[Execution]) -> dict[int, list[Reason]]:
    """What each rule of a key says of the history's keys, each rule's function called on
    each key's history itself."""
    ctx = Context([], {e.execution: e for e in ran}, Gateways(), ROUTES)
    found: dict[int, list[Reason]] = {rule: [] for rule in (1, 2, 3, 4, 7, 10)}
    for key in {(a.route, a.tenant, a.key) for a in history}:
        own = [a for a in history if (a.route, a.tenant, a.key) == key]
        k = KeyHistory(key, [e for e in ran if (e.route, e.tenant, e.key) == key], own, ctx)
        extras = extra_runs(k, ctx)
        for rule, violations in (
            (1, rule_1(k, extras, ctx)), (2, rule_2(k, ctx)), (3, rule_3(k, ctx)),
            (4, rule_4(k, extras, ctx, Floor().grace)), (7, rule_7(k)), (10, rule_10(k)),
        ):  # fmt: skip
            found[rule] += [v.reason for v in violations]
    return found


@pytest.mark.parametrize("broken", sorted(KEY_RULES))
def test_each_rule_of_a_key_alone_on_a_history_that_breaks_only_it(broken: int) -> None:
    history, ran, reason = KEY_RULES[broken]
    assert reason.rule == broken
    assert reasons(check(history, ran, [], ROUTES)) == [reason]
    assert {rule: found for rule, found in key_rules(history, ran).items() if found} == {
        broken: [reason]
    }


def test_each_rule_of_the_run_alone() -> None:
    """Rules 6, 8 and 9 judge the run: a traceback, an unclean exit, too few 2xx and too few
    executions, a run the harness distrusts; each alone, on an otherwise clean history."""
    clean = ([attempt(1)], [execution(1)], [])
    assert reasons(check(*clean, ROUTES, Gateways(tracebacks=1))) == [Reason.TRACEBACK_LOGGED]
    unclean = Gateways(exit_codes=[0, 1])
    assert reasons(check(*clean, ROUTES, unclean)) == [Reason.UNCLEAN_EXIT]
    assert [(v.reason, v.key) for v in rule_6(0, unclean)] == [(Reason.UNCLEAN_EXIT, "gateway 1")]
    refused = [attempt(n, 503, key=f"k{n}", start=10 + n, end=10.1 + n) for n in range(20)]
    floor = Floor(share_2xx=0.5, rate=1.0)
    assert reasons(check(refused, [], [], ROUTES, floor=floor)) == [
        Reason.FEW_2XX, Reason.FEW_EXECUTIONS,
    ]  # fmt: skip
    assert [v.reason for v in rule_8((0, 20), 0, 20.0, 0.5, 1.0)] == [
        Reason.FEW_2XX, Reason.FEW_EXECUTIONS,
    ]  # fmt: skip
    assert reasons(check(*clean, ROUTES, untrusted=["client 0 exited 1"])) == [Reason.UNTRUSTED]
    assert [v.reason for v in rule_9(["client 0 exited 1"])] == [Reason.UNTRUSTED]


def test_a_clean_history_has_no_violation() -> None:
    history = [attempt(1), attempt(2, start=11, end=11.1)]
    verdict = check(history, [execution(1)], [], ROUTES, Gateways(exit_codes=[0]))
    assert verdict.violations == []
    assert verdict.runs_per_key == {1: 1}
    assert verdict.availability == 1.0


# Rule 1: executions per key, and the causes a route's policy accepts.


def test_a_double_execution_is_reported_on_a_record_route() -> None:
    history = [attempt(1, CUT, end=12.0), attempt(2, start=13, end=13.1, execution="x2", body="b2")]
    ran = [execution(1), execution(2, at=13.05, caused_by="a2")]
    killed = [Fault("gateway-kill", "gateway 0", 10.5, 11.0)]
    gateways = Gateways(said((1, 13.0, Event.OWNER_LOST, "a2"), settled="held", route="record"))
    verdict = check(history, ran, killed, ROUTES, gateways)
    assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE]
    assert Cause.UNEXPLAINED.words in verdict.violations[0].what


def rerun_on_release(outcome: str = "", status: int = 201, gateway: int = 1) -> list[Attempt]:
    """The key's first call cut on gateway 0 (killed), its retry on gateway 1 run again."""
    return [
        attempt(1, CUT, route="release", end=12.0),
        attempt(2, status, route="release", start=13, end=13.1, execution="x2", body="b2",
                outcome=outcome, gateway=gateway),
    ]  # fmt: skip


RERUN = [execution(1, route="release"), execution(2, route="release", at=13.05, caused_by="a2")]
KILLED = [Fault("gateway-kill", "gateway 0", 10.5, 11.0)]


def test_a_lost_owners_key_run_again_is_counted_where_its_gateway_logged_it_so() -> None:
    """The retry's gateway logged that it settled the lost owner's key as `rerun` (under the
    retry's request id): counted, whether or not its client was told so (it timed out)."""
    for status in (201, TIMED_OUT):
        gateways = Gateways(
            said((1, 13.0, Event.OWNER_LOST, "a2"), settled="rerun", route="release")
        )
        verdict = check(rerun_on_release(status=status), RERUN, KILLED, ROUTES, gateways)
        assert verdict.violations == [], status
        assert verdict.explained == {Cause.OWNER_LOST_RERUN: 1}
    verdict = check(rerun_on_release("rerun"), RERUN, KILLED, ROUTES)  # the answer says it
    assert verdict.violations == [] and verdict.explained == {Cause.OWNER_LOST_RERUN: 1}


def test_a_rerun_its_gateway_does_not_name_is_reported_even_with_its_owner_stopped() -> None:
    """No event names the run (another request's does not count), no rerun answer: on this
    release, a gateway stopped around the key's calls is no cause; only the earlier
    release's gateway, whose log names no event, is judged by the faults' times."""
    stopped = [Fault("gateway-stop", "gateway 0", 10.5, 14.0)]
    for gateways in (
        Gateways(),
        Gateways(said((1, 13.0, Event.OWNER_LOST, "a9"), settled="rerun", route="release")),
    ):
        verdict = check(rerun_on_release(), RERUN, stopped, ROUTES, gateways)
        assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE]
        assert Cause.UNEXPLAINED.words in verdict.violations[0].what
    verdict = check(rerun_on_release(), RERUN, stopped, ROUTES, Gateways(earlier=[1]))
    assert verdict.violations == [] and verdict.explained == {Cause.OWNER_STOOD_STILL: 1}


def test_a_lost_owners_rerun_is_accepted_only_where_on_owner_lost_is_release() -> None:
    history = [a._replace(route="record") for a in rerun_on_release("rerun")]
    ran = [e._replace(route="record") for e in RERUN]
    assert reasons(check(history, ran, KILLED, ROUTES)) == [Reason.RAN_MORE_THAN_ONCE]
    verdict = check(history, ran, KILLED, routes(lost="release"))
    assert verdict.violations == [] and verdict.explained == {Cause.OWNER_LOST_RERUN: 1}


def test_a_key_run_again_after_its_lookup_said_it_had_not_happened_is_reported() -> None:
    history = [a._replace(route="release") for a in rerun_on_release()]
    gateways = Gateways(
        said((1, 13.0, Event.OWNER_LOST, "a2"), settled="not_happened", route="release")
    )
    verdict = check(history, RERUN, KILLED, ROUTES, gateways)
    assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE]
    assert Cause.OWNER_LOST_NOT_HAPPENED.words in verdict.violations[0].what


def test_an_unknown_outcome_released_is_counted_on_a_release_route() -> None:
    """The upstream reset after executing, or the gateway answered 502 and released."""
    reset = [execution(1, route="release", fault="reset"), RERUN[1]]
    verdict = check(rerun_on_release(), reset, [], ROUTES)
    assert verdict.violations == []
    assert verdict.explained == {Cause.UPSTREAM_FAILED_AFTER: 1}
    history = [attempt(1, 502, route="release"), rerun_on_release()[1]]
    verdict = check(history, RERUN, [], ROUTES)
    assert verdict.violations == [] and verdict.explained == {Cause.ANSWERED_502_504: 1}
    record = [a._replace(route="record") for a in history]
    assert reasons(check(record, [e._replace(route="record") for e in RERUN], [], ROUTES)) == [
        Reason.RAN_MORE_THAN_ONCE
    ]


def test_a_key_run_again_after_its_gateway_logged_its_outcome_unknown_is_counted() -> None:
    """The owner's call timed out after it was sent (its client gone meanwhile, so no 504
    reached it) and its gateway released the key, as a `release` route says: the gateway's
    `unknown-outcome` event for the earlier call explains the run after it; not an event
    for another request, nor on a route that records unknown outcomes."""
    history = [attempt(1, TIMED_OUT, route="release", end=13.0), rerun_on_release()[1]]
    for request, explained in (("a1", True), ("a9", False)):
        gateways = Gateways(said((0, 12.0, Event.UNKNOWN_OUTCOME, request), route="release"))
        verdict = check(history, RERUN, [], ROUTES, gateways)
        assert (verdict.explained == {Cause.UNKNOWN_OUTCOME_LOGGED: 1}) is explained
        assert (verdict.violations == []) is explained
    record = [a._replace(route="record") for a in history]
    gateways = Gateways(said((0, 12.0, Event.UNKNOWN_OUTCOME, "a1"), route="record"))
    verdict = check(record, [e._replace(route="record") for e in RERUN], [], ROUTES, gateways)
    assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE]


def test_a_rerun_after_a_lost_master_is_never_accepted() -> None:
    history = [attempt(1, 503, route="release"), rerun_on_release()[1]]
    failover = [Fault("redis-kill", "master :7000 (failover)", 11.0, 12.0)]
    verdict = check(history, RERUN, failover, ROUTES)
    assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE]
    assert Cause.MASTER_LOST.words in verdict.violations[0].what


def test_a_rerun_after_a_502_is_the_release_policys_even_during_a_failover() -> None:
    """The key's call ran, was cut upstream, answered 502 and released, as the route asks:
    a failover around it is not what made it run again."""
    history = [attempt(1, 502, route="release"), rerun_on_release()[1]]
    failover = [Fault("redis-failover", "master :7000 -> :7001", 9.0, 14.0)]
    verdict = check(history, RERUN, failover, ROUTES)
    assert verdict.violations == [] and verdict.explained == {Cause.ANSWERED_502_504: 1}


def test_a_502_explains_no_rerun_it_did_not_release_before() -> None:
    """A 502 explains a rerun only where the key's call ran, was answered so and released
    before it: not the rerun's own 502 after a claim lost with the master."""
    own = [attempt(1, CUT, route="release", end=12.0), rerun_on_release(status=502)[1]]
    failover = [Fault("redis-failover", "master :7000 -> :7001", 9.0, 14.0)]
    verdict = check(own, RERUN, failover, ROUTES)
    assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE]
    assert Cause.MASTER_LOST.words in verdict.violations[0].what


# Rules 2, 3, 4, 7, 10: what a key's answers say.


def test_two_2xx_bodies_for_one_key_are_reported() -> None:
    history = [attempt(1), attempt(2, start=11, end=11.1, body="tampered")]
    verdict = check(history, [execution(1)], [], ROUTES)
    assert reasons(verdict) == [Reason.BODIES_DIFFER, Reason.DIFFERS_FROM_ITS_EXECUTION]


def test_a_2xx_naming_no_execution_is_reported() -> None:
    verdict = check([attempt(1, execution="x9")], [execution(1)], [], ROUTES)
    assert reasons(verdict) == [Reason.NAMES_NO_EXECUTION]


def test_an_answer_for_another_payload_is_reported() -> None:
    history = [attempt(1), attempt(2, payload="p2", start=11, end=11.1)]
    assert reasons(check(history, [execution(1)], [], ROUTES)) == [Reason.ANOTHER_PAYLOADS_ANSWER]


def test_a_run_after_a_2xx_is_a_lost_acknowledged_outcome_even_on_a_release_route() -> None:
    history = [
        attempt(1, route="release"),
        attempt(2, 502, route="release", start=11, end=11.1, outcome="unknown"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=11.05)]
    assert Reason.RAN_AFTER_A_2XX in reasons(check(history, ran, [], ROUTES))


def test_a_replay_that_is_no_longer_the_2xx_is_a_lost_acknowledged_outcome() -> None:
    history = [attempt(1), attempt(2, 502, start=12, end=12.1)]
    verdict = check(history, [execution(1)], [], ROUTES)
    assert reasons(verdict) == [Reason.OTHER_ANSWER_AFTER_A_2XX]
    assert "502" in verdict.violations[0].detail


def test_a_replay_that_hangs_or_is_cut_with_no_fault_on_is_a_lost_acknowledged_outcome() -> None:
    for status in (TIMED_OUT, CUT):
        history = [attempt(1), attempt(2, status, start=12, end=15)]
        verdict = check(history, [execution(1)], [], ROUTES)
        assert reasons(verdict) == [Reason.NO_ANSWER_AFTER_A_2XX]


def test_a_replay_that_hangs_under_a_fault_or_is_refused_only_says_later() -> None:
    """A fault on during the attempt or up to 2 s before it, anywhere (a paused gateway, a
    Redis that came back), excuses a replay that got no answer; a refused connection sent
    nothing, and says "not now" as a 503 does."""
    ran = [execution(1)]
    for fault in (
        Fault("gateway-stop", "gateway 1", 11.0, 13.0),  # on while it waited
        Fault("redis-kill", "redis :7000", 10.5, 10.9),  # ended 1.1 s before it started
    ):
        hung = [attempt(1), attempt(2, TIMED_OUT, start=12, end=15)]
        assert check(hung, ran, [fault], ROUTES).violations == []
    refused = [attempt(1), attempt(2, REFUSED, start=12, end=12.01)]
    assert check(refused, ran, [], ROUTES).violations == []
    long_after = [Fault("gateway-stop", "gateway 0", 5.0, 9.9)]  # 2.1 s before it started
    hung = [attempt(1), attempt(2, TIMED_OUT, start=12, end=15)]
    assert reasons(check(hung, ran, long_after, ROUTES)) == [Reason.NO_ANSWER_AFTER_A_2XX]


def test_a_409_or_503_after_a_2xx_only_says_later_while_it_is_stored_or_redis_is_down() -> None:
    soon = [attempt(1), attempt(2, 409, start=11, end=11.1)]
    assert check(soon, [execution(1)], [], ROUTES).violations == []
    down = [attempt(1), attempt(2, 503, start=30, end=30.1)]
    redis_down = [Fault("redis-kill", "redis :7000", 29.0, 29.5)]
    assert check(down, [execution(1)], redis_down, ROUTES).violations == []
    for status in (409, 503):
        late = [attempt(1), attempt(2, status, start=30, end=30.1)]
        assert reasons(check(late, [execution(1)], [], ROUTES)) == [Reason.OTHER_ANSWER_AFTER_A_2XX]


def test_another_payload_after_a_2xx_may_be_refused() -> None:
    history = [attempt(1), attempt(2, 422, start=12, end=12.1, payload="p2")]
    assert check(history, [execution(1)], [], ROUTES).violations == []


def test_a_replay_with_another_status_line_is_reported() -> None:
    history = [attempt(1), attempt(2, 200, start=11, end=11.1, reason="OK")]
    verdict = check(history, [execution(1)], [], ROUTES)
    assert reasons(verdict) == [Reason.OTHER_STATUS_LINE]
    assert "200 OK where the first 2xx (a1) was 201 Created" in verdict.violations[0].detail
    reworded = [attempt(1), attempt(2, start=11, end=11.1, reason="Payment Created")]
    assert reasons(check(reworded, [execution(1)], [], ROUTES)) == [Reason.OTHER_STATUS_LINE]


def test_a_fenced_answer_says_it_is_not_the_record_and_is_held_to_its_body_only() -> None:
    """A stale owner's answer marked `Idempotency-Outcome: fenced` tells its client that the
    record holds another claim's answer (a reconciled one: the lookup's body, the gateway's
    own head): the first 2xx that the replays are held to is the first one not so marked."""
    history = [
        attempt(1, outcome="fenced", head="upstream's", end=11.0),
        attempt(2, start=10.5, end=10.9, outcome="reconciled", head="gateway's"),
        attempt(3, start=12, end=12.1, outcome="reconciled", head="gateway's"),
    ]
    assert check(history, [execution(1)], [], ROUTES).violations == []


def test_a_shared_key_answered_with_another_tenants_execution_is_reported() -> None:
    history = [attempt(1), attempt(2, tenant="t1", start=11, end=11.1)]  # the same payload
    verdict = check(history, [execution(1)], [], ROUTES)
    assert reasons(verdict) == [Reason.ANOTHER_KEYS_ANSWER]
    assert "record/t0/k1" in verdict.violations[0].detail


# Rules 5, 6, 8: the run's counts.


def test_a_500_a_traceback_an_access_log_500_and_an_unclean_exit_are_reported() -> None:
    gateways = Gateways(tracebacks=2, logged_500=1, exit_codes=[0, 1])
    verdict = check([attempt(1), attempt(2, 500)], [execution(1)], [], ROUTES, gateways)
    assert reasons(verdict) == [
        Reason.ANSWERED_500, Reason.LOGGED_500, Reason.TRACEBACK_LOGGED, Reason.UNCLEAN_EXIT,
    ]  # fmt: skip
    assert [v.key for v in verdict.violations if v.reason is Reason.UNCLEAN_EXIT] == ["gateway 1"]


def test_availability_counts_expected_answers_per_second() -> None:
    history = [
        attempt(1),
        attempt(2, 409, start=10.5),
        attempt(3, 502, start=11.2, outcome="unknown"),
        attempt(4, CUT, start=11.5),
    ]
    verdict = check(history, [execution(1)], [], ROUTES)
    assert verdict.per_second == {0: (2, 1, 2), 1: (0, 0, 2)}
    assert verdict.availability == 0.5


def test_the_liveness_floor_passes_a_run_that_serves() -> None:
    served = [attempt(n, key=f"k{n}", execution=f"x{n}", body=f"b{n}", start=10 + n,
                      end=10.1 + n) for n in range(20)]  # fmt: skip
    ran = [execution(n, key=f"k{n}", caused_by=f"a{n}", at=10.05 + n) for n in range(20)]
    assert check(served, ran, [], ROUTES, floor=Floor(share_2xx=0.5, rate=1.0)).violations == []


def test_the_floor_counts_only_attempts_with_no_fault_on() -> None:
    refused = [attempt(n, 503, key=f"k{n}", start=10 + n, end=10.1 + n) for n in range(10)]
    served = [attempt(n, key=f"k{n}", execution=f"x{n}", body=f"b{n}", start=30 + n,
                      end=30.1 + n) for n in range(10, 20)]  # fmt: skip
    ran = [execution(n, key=f"k{n}", caused_by=f"a{n}", at=30.05 + n) for n in range(10, 20)]
    down = [Fault("redis-kill", "redis :7000", 9.0, 19.5)]
    verdict = check([*refused, *served], ran, down, ROUTES, floor=Floor(0.9, 0.1))
    assert verdict.quiet_2xx == (10, 10)
    assert verdict.violations == []


def test_keys_held_unknown_are_counted_by_the_fault_on_their_attempts() -> None:
    history = [attempt(1, 502, start=10, end=11, outcome="unknown", gateway=0)]
    cut_off = [
        Fault("upstream-blackhole", "gateway 0 <-> upstream", 10.5, 12),
        Fault("gateway-kill", "gateway 1", 10.5, 12),  # another gateway: not this key's
    ]
    verdict = check(history, [], cut_off, ROUTES)
    assert verdict.held_unknown == 1
    assert verdict.unknown_causes == {"during upstream-blackhole": 1}


def test_what_the_gateways_logged_they_did_is_counted() -> None:
    gateways = Gateways(
        [
            *said((0, 1.0, Event.NOT_SENT_LATE, "a1"), (0, 1.0, Event.NOT_SENT_LATE, "a2")),
            *said((0, 1.0, Event.HELD_THROUGH_STALL, "a3")),
            *said((1, 2.0, Event.OWNER_LOST, "a4"), settled="late_answer"),
        ]
    )
    verdict = check([attempt(1)], [execution(1)], [], ROUTES, gateways)
    assert verdict.said == {
        Event.NOT_SENT_LATE: 2, Event.HELD_THROUGH_STALL: 1, Event.OWNER_LOST: 1,
    }  # fmt: skip
    assert verdict.settled == {"late_answer": 1}


# A fail_mode: open route forwards without idempotency while Redis is unreachable: a key may
# run once more there, by the attempt so forwarded, and by no other.
REDIS_DOWN = [Fault("redis-stop", "redis :7000", 12.5, 14.0)]


def open_history(*, degraded: str = "true", gateway: int = 0) -> list[Attempt]:
    """The key run and acknowledged, then its replay forwarded as degraded at 13 s (another
    execution, another body and head) and replayed from the record after."""
    return [
        attempt(1, route="open"),
        attempt(2, route="open", start=13, end=13.1, gateway=gateway, execution="x2",
                body="b2", head="h2", degraded=degraded),
        attempt(3, route="open", start=20, end=20.1),
    ]  # fmt: skip


OPEN_RUNS = [execution(1, route="open"), execution(2, route="open", at=13.05, caused_by="a2")]


def test_a_rerun_forwarded_as_degraded_while_redis_was_down_is_counted_not_reported() -> None:
    """Neither a second execution (rule 1), one after a 2xx (rule 4), nor a second body and
    head (rules 2 and 10): the degraded answer was never the key's claim's."""
    verdict = check(open_history(), OPEN_RUNS, REDIS_DOWN, ROUTES)
    assert verdict.violations == []
    assert verdict.explained == {Cause.DEGRADED_CUT_OFF: 1}
    assert verdict.degraded == 1


def test_a_degraded_rerun_still_answers_its_own_key_tenant_and_payload() -> None:
    history = open_history()
    history[1] = history[1]._replace(body="b1")  # the first execution's body: not its own
    verdict = check(history, OPEN_RUNS, REDIS_DOWN, ROUTES)
    assert reasons(verdict) == [Reason.DIFFERS_FROM_ITS_EXECUTION]


def test_a_rerun_on_the_open_route_with_no_degraded_attempt_is_reported() -> None:
    """Redis down, but the second execution's attempt was answered from a claim (no
    Idempotency-Degraded, no fail-open logged): the key's claim did not hold."""
    verdict = check(open_history(degraded=""), OPEN_RUNS, REDIS_DOWN, ROUTES)
    assert Reason.RAN_MORE_THAN_ONCE in reasons(verdict)


def test_a_degraded_rerun_with_redis_not_cut_off_is_reported() -> None:
    """Marked degraded with no Redis fault on (a gateway that cannot read what Redis holds,
    say), on the attempt's own gateway (another's link cut off), or long after one."""
    for faults in (
        [],
        [Fault("redis-blackhole", "gateway 1 <-> redis", 12.5, 14.0)],
        [Fault("redis-stop", "redis :7000", 5.0, 10.9)],  # ended 2.1 s before it started
        [Fault("gateway-stop", "gateway 0", 12.5, 14.0)],  # not Redis
    ):
        verdict = check(open_history(), OPEN_RUNS, faults, ROUTES)
        assert Reason.RAN_MORE_THAN_ONCE in reasons(verdict), faults
        assert Cause.DEGRADED_NOT_CUT_OFF.words in verdict.violations[0].what
    for link in ("gateway 0 <-> redis", "redis :7000"):  # a stop's lead-in holds Redis too
        cut_off = [Fault("redis-held", link, 12.5, 14.0)]
        assert check(open_history(), OPEN_RUNS, cut_off, ROUTES).violations == []


def test_a_degraded_answer_explains_nothing_on_a_route_that_fails_closed() -> None:
    history = [a._replace(route="record") for a in open_history()]
    ran = [e._replace(route="record") for e in OPEN_RUNS]
    assert Reason.RAN_MORE_THAN_ONCE in reasons(check(history, ran, REDIS_DOWN, ROUTES))


def test_two_degraded_runs_and_no_claim_are_one_key_run_twice_without_idempotency() -> None:
    history = [
        attempt(1, route="open", start=12.6, end=12.7, degraded="true"),
        attempt(2, route="open", start=13, end=13.1, execution="x2", body="b2", head="h2",
                degraded="true"),
    ]  # fmt: skip
    ran = [execution(1, route="open", at=12.65), OPEN_RUNS[1]]
    verdict = check(history, ran, REDIS_DOWN, ROUTES)
    assert verdict.violations == []
    assert sum(verdict.explained.values()) == 1


# On a loaded host Redis may answer slower than a gateway's socket_timeout with no fault on:
# its calls time out, its breaker opens, and the open route fails open, as the contract lets
# it. Its log says so of that very request, which explains the degraded rerun; a gateway
# that has just stood still says nothing of Redis by failing open, and its rerun stays wrong.


def test_a_degraded_rerun_is_explained_by_its_gateways_fail_open_event_for_it() -> None:
    gateways = Gateways(said((1, 13.04, Event.FAILED_OPEN, "a2")))
    verdict = check(open_history(gateway=1), OPEN_RUNS, [], ROUTES, gateways)
    assert verdict.violations == []
    assert verdict.explained == {Cause.DEGRADED_LOGGED: 1}


def test_a_degraded_rerun_with_no_fault_and_no_fail_open_event_for_it_is_reported() -> None:
    """No event; one for another request (at the very moment), of another kind for this one,
    or one naming no request (as only the earlier release's lines do)."""
    for events in (
        [],
        said((1, 13.04, Event.FAILED_OPEN, "a9")),
        said((1, 13.04, Event.AFTER_STALL, "a2")),
        said((1, 13.04, Event.FAILED_OPEN, None)),
    ):
        verdict = check(open_history(gateway=1), OPEN_RUNS, [], ROUTES, Gateways(events))
        assert reasons(verdict) == [
            Reason.RAN_MORE_THAN_ONCE, Reason.BODIES_DIFFER, Reason.RAN_AFTER_A_2XX,
            Reason.OTHER_HEADERS,
        ], events  # fmt: skip
        assert Cause.DEGRADED_NOT_CUT_OFF.words in verdict.violations[0].what


def test_the_earlier_releases_fail_open_line_is_matched_to_the_attempt_by_its_time() -> None:
    """Its log names no request: a fail-open line of its gateway and route within the attempt
    (to the millisecond its times are cut to) explains the degraded rerun."""
    for at, explained in ((13.04, True), (13.1005, True), (13.102, False), (12.9, False)):
        gateways = Gateways(said((1, at, Event.FAILED_OPEN, None)), earlier=[1])
        verdict = check(open_history(gateway=1), OPEN_RUNS, [], ROUTES, gateways)
        assert (verdict.violations == []) is explained, at


def test_a_fail_open_forward_the_gateway_answered_502_is_not_held_to_the_record() -> None:
    """After the key's 2xx, its replay failed open (logged for it by this release, within it
    by the earlier one) into an unreachable upstream: the gateway's own 502, unmarked, ran
    nothing. With no such line, a 502 after a 2xx is an acknowledged outcome lost."""
    history = [
        attempt(1, route="open"),
        attempt(2, 502, route="open", start=13, end=13.1, gateway=1, outcome="unreachable"),
    ]
    ran = [execution(1, route="open")]
    this = Gateways(said((1, 13.04, Event.FAILED_OPEN, "a2")))
    earlier = Gateways(said((1, 13.04, Event.FAILED_OPEN, None)), earlier=[1])
    for gateways in (this, earlier):
        assert check(history, ran, [], ROUTES, gateways).violations == []
    for gateways in (Gateways(), Gateways(earlier=[1])):
        verdict = check(history, ran, [], ROUTES, gateways)
        assert reasons(verdict) == [Reason.OTHER_ANSWER_AFTER_A_2XX]


# Gateway 1 stood still until 11.5 s (or was killed and back by then): its degraded rerun at
# 13 s comes within the lease (2 s) and AFTER_FAULT (2 s) of its wake.
STOOD_STILL = [
    [Fault("gateway-stop", "gateway 1", 6.0, 11.5)],
    [Fault("gateway-kill", "gateway 1", 10.5, 11.5)],
]
FAILED_OPEN_A2 = said((1, 13.04, Event.FAILED_OPEN, "a2"))


def test_a_degraded_rerun_right_after_its_gateway_stood_still_is_reported() -> None:
    """This release answers 503 there: its breaker opened on timers that ran out while it
    slept, and says nothing of Redis."""
    for faults in STOOD_STILL:
        gateways = Gateways(FAILED_OPEN_A2)
        verdict = check(open_history(gateway=1), OPEN_RUNS, faults, ROUTES, gateways)
        assert Reason.RAN_MORE_THAN_ONCE in reasons(verdict), faults
        assert Cause.DEGRADED_AFTER_STALL.words in verdict.violations[0].what
        assert verdict.earlier_stalls == []
    # Past the lease and AFTER_FAULT, the fail-open is Redis's again; and a longer lease
    # keeps it the stall's.
    later = [Fault("gateway-stop", "gateway 1", 6.0, 8.9)]
    args = (open_history(gateway=1), OPEN_RUNS, later)
    assert check(*args, ROUTES, Gateways(FAILED_OPEN_A2)).violations == []
    verdict = check(*args, routes(leases={"open": 4.0}), Gateways(FAILED_OPEN_A2))
    assert Reason.RAN_MORE_THAN_ONCE in reasons(verdict)


def test_a_degraded_rerun_after_an_earlier_release_gateway_stood_still_is_counted_apart() -> None:
    """In a mixed fleet, the earlier release's known defect (fixed in this one): reported
    apart from the violations; on this release's gateway beside it, still a violation."""
    line = said((1, 13.04, Event.FAILED_OPEN, None))
    for faults in STOOD_STILL:
        verdict = check(
            open_history(gateway=1), OPEN_RUNS, faults, ROUTES, Gateways(line, earlier=[1])
        )
        assert verdict.violations == [], faults
        assert len(verdict.earlier_stalls) == 1
        assert Cause.DEGRADED_AFTER_STALL.words in verdict.earlier_stalls[0].what
        assert verdict.explained == {}
        gateways = Gateways(FAILED_OPEN_A2, earlier=[0])
        verdict = check(open_history(gateway=1), OPEN_RUNS, faults, ROUTES, gateways)
        assert Reason.RAN_MORE_THAN_ONCE in reasons(verdict) and verdict.earlier_stalls == []


def held_through_stop() -> tuple[list[Attempt], list[Execution], list[Fault]]:
    """A call held by gateway 1 through its stop (8.5-13 s, SIGCONT sent at 12.98 s): its
    client timed out at 11.5 s and retried on gateway 0, which ran the key at 11.6 s and
    answered 201; gateway 1 woke and ran the held call at 13.05 s."""
    history = [
        attempt(1, TIMED_OUT, route="open", start=8.6, end=11.5, gateway=1),
        attempt(2, route="open", start=11.55, end=11.7, execution="x1"),
    ]
    ran = [
        execution(1, route="open", at=11.6, caused_by="a2"),
        execution(2, route="open", at=13.05, caused_by="a1"),
    ]
    return history, ran, [Fault("gateway-stop", "gateway 1", 8.5, 13.0, 8.51, 12.98)]


def test_a_call_held_through_a_stall_and_run_failing_open_is_the_stalls() -> None:
    """No attempt holds the marker (its client was gone): the gateway's event names the held
    request. A violation on this release; on the earlier release, whose line names no
    request, seen by its time (between the wake and the run) and counted apart."""
    history, ran, faults = held_through_stop()
    gateways = Gateways(said((1, 13.02, Event.FAILED_OPEN, "a1")))
    verdict = check(history, ran, faults, ROUTES, gateways)
    assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE, Reason.RAN_AFTER_A_2XX]
    assert all(Cause.DEGRADED_AFTER_STALL.words in v.what for v in verdict.violations)
    earlier = Gateways(said((1, 6.0, Event.FAILED_OPEN, None), (1, 13.0, Event.FAILED_OPEN, None)),
                       earlier=[1])  # fmt: skip
    verdict = check(history, ran, faults, ROUTES, earlier)
    assert verdict.violations == []
    assert [v.key for v in verdict.earlier_stalls] == ["open/t0/k1"]
    # Run as it woke with no fail-open logged then (its claim's call), it is no degraded
    # forward: a claim run twice, whichever release.
    for gateways in (Gateways(), Gateways(said((1, 6.0, Event.FAILED_OPEN, None)), earlier=[1])):
        verdict = check(history, ran, faults, ROUTES, gateways)
        assert reasons(verdict) == [Reason.RAN_MORE_THAN_ONCE, Reason.RAN_AFTER_A_2XX]
        assert verdict.earlier_stalls == []


def test_a_call_forwarded_without_idempotency_its_client_never_heard_of_is_reported() -> None:
    """Logged as failing open for a request whose client had gone (timed out: no marker came
    back), with no stall: the client's retry ran it again, not knowing it might run."""
    history, ran, _ = held_through_stop()
    gateways = Gateways(said((1, 13.02, Event.FAILED_OPEN, "a1")))
    verdict = check(history, ran, [], ROUTES, gateways)
    assert Reason.RAN_MORE_THAN_ONCE in reasons(verdict)
    assert Cause.DEGRADED_UNTOLD.words in verdict.violations[0].what


# What the gateways logged, read by fields.


def test_a_gateways_log_is_read_by_its_fields() -> None:
    """Events by their `event` field (the message's words whatever they are), with route,
    request and how a lost owner's key was settled; the earlier release's fail-open line by
    its words (it names no event); tracebacks and access-log 500s counted."""
    this = "\n".join(
        [
            '{"ts":"2026-11-28T23:14:20.363Z","level":"error","msg":"anything at all",'
            '"event":"not-sent-late","route":"release","request_id":"a7"}',
            '{"ts":"2026-11-28T23:14:21.000Z","msg":"x","event":"owner-lost","route":"record",'
            '"request_id":"a8","settled":"held"}',
            '{"ts":"2026-11-28T23:14:21.5Z","msg":"route open fails open: said in words only"}',
            '{"ts":"2026-11-28T23:14:22.000Z","msg":"x","event":"no-such-event","route":"open"}',
            '{"ts":"2026-11-28T23:14:22.1Z","logger":"gateway.http.server.access","status":500}',
            "Traceback (most recent call last):",
            '{"ts": 3, "msg": "x"}',
        ]
    )
    earlier = (
        '{"ts":"2026-11-28T23:14:23.250Z","msg":"redis unavailable, route open fails open: '
        'TimeoutError"}\n{"ts":"2026-11-28T23:14:24.000Z","msg":"x","event":"failed-open"}'
    )
    gateways = read_gateways({0: this, 1: earlier, -1: "Traceback"}, earlier=[1], exit_codes=[0])
    assert gateways.of("a7", Event.NOT_SENT_LATE) == Said(
        0, 1795907660.363, Event.NOT_SENT_LATE, "release", "a7"
    )
    assert gateways.of("a8", Event.OWNER_LOST) == Said(
        0, 1795907661.0, Event.OWNER_LOST, "record", "a8", "held"
    )
    assert gateways.counts == {Event.NOT_SENT_LATE: 1, Event.OWNER_LOST: 1, Event.FAILED_OPEN: 1}
    assert gateways.unnamed == {(1, "open", Event.FAILED_OPEN): [1795907663.25]}
    assert (gateways.tracebacks, gateways.logged_500, gateways.settled) == (2, 1, {"held": 1})


# The follow route: a duplicate of a call in flight follows its answer as it is made, a
# replay that arrived early. Its answers are held as a replay's are, whole or cut short
# after the head: its bytes those of its execution as the upstream logged them (rule 2),
# of its own key (rule 3), its head the first 2xx's and marked a replay (rule 10).
SENT = (
    b'id: 1\ndata: {"id":"x1","key":"k1"}\n\n'  # 36 bytes: a cut after them names x1
    b'id: 2\ndata: {"x":"x1","n":2,"r":"5d1e"}\n\n'
    b'id: 3\ndata: {"x":"x1","n":3,"r":"c07a"}\n\n'
)
NAMED = 36


def streamed(
    n: int,
    got: bytes = SENT,
    *,
    cut: bool = False,
    kind: str = "follow",
    replayed: str = "true",
    start: float = 10.2,
    end: float = 10.5,
    key: str = "k1",
    named: str | None = None,
    head: str = "h1",
    gateway: int = 0,
    framing: str = "chunked",
) -> Attempt:
    """An answer on the follow route: the bytes that came, cut short after its head or not;
    the execution they name, x1 once its first event came whole."""
    execution = named if named is not None else ("x1" if len(got) >= NAMED else "")
    return Attempt(
        f"a{n}", "o1", kind, "follow", "t0", key, "p1", gateway, start, end,
        CUT if cut else 200, "", digest(got), execution, "", "OK", head, "", replayed,
        framing, f"200 {len(got)}" if cut else "",
    )  # fmt: skip


def stream_run(
    n: int = 1, *, key: str = "k1", sent: bytes = SENT, logged: bool = True
) -> Execution:
    """The execution of the key's first call (a1), with the bytes it sent, as logged."""
    sent_field = base64.b64encode(sent).decode() if logged else ""
    return Execution(f"x{n}", "follow", "t0", key, "p1", "a1", 10.05, digest(sent), "", sent_field)


OWNER = streamed(1, kind="first", replayed="", start=10.0, end=10.6)


def test_followers_whole_and_cut_short_with_their_executions_bytes_break_no_rule() -> None:
    """The first answer; a follower that streamed it whole, one from the record (framed by
    length: it came as the answer was stored), and two cut short, after its first event
    (naming x1) and before (naming none): each its execution's bytes, or their start."""
    history = [
        OWNER,
        streamed(2),
        streamed(3, framing="length", start=10.55, end=10.6),
        streamed(4, SENT[:50], cut=True),
        streamed(5, SENT[:10], cut=True),
    ]
    verdict = check(history, [stream_run()], [], ROUTES)
    assert verdict.violations == []
    assert verdict.followers == {"streamed": 1, "from the record": 1, "cut after the head": 2}
    assert verdict.followers_owner_down == {}


MISSED = SENT[:NAMED] + SENT[-42:] + SENT[-42:]  # the second event missed, the last twice
# Each reason of a follower's answer alone, on the follow route: the rule's own, and no other.
FOLLOWER_CASES = {
    Reason.DIFFERS_FROM_ITS_EXECUTION: [OWNER, streamed(2, MISSED[: len(SENT)], cut=False)],
    Reason.CUT_NOT_ITS_START: [OWNER, streamed(2, MISSED[:90], cut=True)],
    Reason.ANOTHER_KEYS_ANSWER: [OWNER, streamed(2, SENT[:50], cut=True, named="x2")],
    Reason.OTHER_HEADERS: [OWNER, streamed(2, SENT[:50], cut=True, head="h2")],
    Reason.MARKED_OTHERWISE: [OWNER, streamed(2, replayed="")],
}


@pytest.mark.parametrize("reason", list(FOLLOWER_CASES), ids=lambda r: r.name)
def test_each_reason_of_a_followers_answer_alone(reason: Reason) -> None:
    history = FOLLOWER_CASES[reason]
    ran = [stream_run(), stream_run(2, key="k2")]  # x2: another key's call
    found = reasons(check(history, ran, [], ROUTES))
    if reason is Reason.DIFFERS_FROM_ITS_EXECUTION:  # and so not the first one's body
        assert found == [Reason.BODIES_DIFFER, reason]
    else:
        assert found == [reason]
    assert {rule: r for rule, r in key_rules(history, ran).items() if r} == {reason.rule: found}


def test_a_follower_cut_short_naming_no_execution_is_held_to_the_start_of_the_keys() -> None:
    """Its bytes name no execution yet: the start of one of its key's, or a violation; with
    no bytes of them logged (a folder kept before they were), not judged."""
    owner_cut = streamed(1, SENT[:20], cut=True, kind="first", replayed="", start=10.0)
    short = [owner_cut, streamed(2, b"id: 9\ndata: {", cut=True)]
    assert reasons(check(short, [stream_run()], [], ROUTES)) == [Reason.CUT_NOT_ITS_START]
    none_ran = reasons(check(short, [], [], ROUTES))  # bytes of no execution: both
    assert none_ran == [Reason.CUT_NOT_ITS_START] * 2
    assert check(short, [stream_run(logged=False)], [], ROUTES).violations == []
    right = [short[0], streamed(2, SENT[:20], cut=True)]
    assert check(right, [stream_run()], [], ROUTES).violations == []


def test_a_2xx_is_marked_a_replay_exactly_when_another_attempt_ran_its_execution() -> None:
    """On a route that follows: a follower unmarked, or the first answer marked, each
    reported; the same on a route that does not follow is not judged by its mark."""
    for history in ([OWNER, streamed(2, replayed="")], [OWNER._replace(replayed="true")]):
        assert reasons(check(history, [stream_run()], [], ROUTES)) == [Reason.MARKED_OTHERWISE]
        elsewhere = [a._replace(route="record") for a in history]
        ran = [stream_run()._replace(route="record")]
        assert check(elsewhere, ran, [], ROUTES).violations == []


def test_followers_of_an_owner_killed_mid_answer_end_cut_or_as_waiting_duplicates() -> None:
    """The owner's gateway (1) killed as it streamed: its client cut, a follower on gateway
    0 cut after two events, another (no head yet) answered 409 as a waiting duplicate is;
    a retry answered 502 unknown (the outcome held for an operator). No violation, and the
    followers counted with their owner down."""
    history = [
        streamed(1, SENT[:NAMED], cut=True, kind="first", replayed="", start=10.0, end=10.4,
                 gateway=1),
        streamed(2, SENT[:80], cut=True, end=12.5),
        streamed(3, b"", kind="follow", start=10.3, end=12.4)._replace(
            status=409, body="", execution="", replayed="", framing="length", head=""
        ),
        Attempt("a4", "o1", "retry", "follow", "t0", "k1", "p1", 0, 13.0, 13.1, 502,
                "unknown", "", "", "owner-lost"),
    ]  # fmt: skip
    killed = [Fault("gateway-kill", "gateway 1", 10.35, 11.0)]
    verdict = check(history, [stream_run()], killed, ROUTES)
    assert verdict.violations == []
    assert verdict.followers == {"cut after the head": 1, "409": 1}
    assert verdict.followers_owner_down == verdict.followers


def test_the_access_logs_followed_answers_are_counted() -> None:
    line = '{"ts":"2026-11-28T23:14:22.1Z","logger":"gateway.http.server.access",'
    logs = {
        0: line + '"status":200,"outcome":"followed"}\n' + line + '"status":200,"outcome":"x"}',
        1: line + '"status":200,"outcome":"followed"}',
    }
    assert read_gateways(logs).followed == 2
    assert check([attempt(1)], [execution(1)], [], ROUTES, read_gateways(logs)).said_followed == 2
