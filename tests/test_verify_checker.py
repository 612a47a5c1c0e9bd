"""The history checker of `loadtest.verify` on handmade histories: each kind of violation
is reported, and what the policy allows is not."""

from __future__ import annotations

from loadtest.verify.checker import (
    DEGRADED_LOGGED,
    Floor,
    Gateways,
    LogLine,
    Verdict,
    check,
    log_lines,
)
from loadtest.verify.history import CUT, REFUSED, TIMED_OUT, Attempt, Execution, Fault

POLICIES = {"record": "record", "reconcile": "reconcile", "release": "release", "open": "open"}
OPEN = ["open"]  # the route with fail_mode: open (its unknown outcomes recorded)


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


def rules(verdict: Verdict) -> list[int]:
    return sorted(v.rule for v in verdict.violations)


def test_a_clean_history_has_no_violation() -> None:
    verdict = check(
        [attempt(1), attempt(2, start=11, end=11.1)], [execution(1)], [], POLICIES, ["ok\n"], [0]
    )
    assert verdict.violations == []
    assert verdict.runs_per_key == {1: 1}
    assert verdict.availability == 1.0


def test_a_double_execution_is_reported_on_a_record_route() -> None:
    history = [attempt(1, CUT, end=12.0), attempt(2, start=13, end=13.1, execution="x2", body="b2")]
    ran = [execution(1), execution(2, at=13.05, caused_by="a2")]
    killed = [Fault("gateway-kill", "gateway 0", 10.5, 11.0)]
    verdict = check(history, ran, killed, POLICIES)
    assert rules(verdict) == [1]
    assert "executed 2 times (owner lost: gateway 0 killed" in verdict.violations[0].what


def test_an_explained_rerun_on_a_release_route_is_counted_not_reported() -> None:
    history = [
        attempt(1, CUT, route="release", end=12.0),
        attempt(2, route="release", start=13, end=13.1, execution="x2", body="b2"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=13.05)]
    killed = [Fault("gateway-kill", "gateway 0", 10.5, 11.0)]
    verdict = check(history, ran, killed, POLICIES)
    assert verdict.violations == []
    assert sum(verdict.explained.values()) == 1


def test_an_unexplained_rerun_on_a_release_route_is_reported() -> None:
    history = [
        attempt(1, 503, route="release"),
        attempt(2, route="release", start=13, end=13.1, execution="x2", body="b2"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=13.05)]
    verdict = check(history, ran, [], POLICIES)
    assert rules(verdict) == [1]
    assert "unexplained" in verdict.violations[0].what


def test_a_wrong_2xx_body_is_reported() -> None:
    history = [attempt(1), attempt(2, start=11, end=11.1, body="tampered")]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [2, 2]  # two bodies for one key; one differs from its execution


def test_a_2xx_naming_no_execution_is_reported() -> None:
    verdict = check([attempt(1, execution="x9")], [execution(1)], [], POLICIES)
    assert rules(verdict) == [2]


def test_a_cross_tenant_answer_is_reported() -> None:
    history = [
        attempt(1),
        attempt(2, tenant="t1", start=11, end=11.1),  # t1 got t0's answer
    ]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [3]
    assert "carries record/t0/k1's answer" in verdict.violations[0].what


def test_an_answer_for_another_payload_is_reported() -> None:
    history = [attempt(1), attempt(2, payload="p2", start=11, end=11.1)]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [3]


def test_a_lost_acknowledged_outcome_is_reported_even_on_a_release_route() -> None:
    history = [
        attempt(1, route="release"),
        attempt(2, 502, route="release", start=11, end=11.1, outcome="unknown"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=11.05)]
    verdict = check(history, ran, [], POLICIES)
    assert 4 in rules(verdict)


def test_a_500_a_traceback_and_an_unclean_exit_are_reported() -> None:
    log = 'Traceback (most recent call last):\n{"status": 500}\n'
    verdict = check([attempt(1), attempt(2, 500)], [execution(1)], [], POLICIES, [log], [0, 1])
    assert rules(verdict) == [6, 6, 6, 6]


def test_availability_counts_expected_answers_per_second() -> None:
    history = [
        attempt(1),
        attempt(2, 409, start=10.5),
        attempt(3, 502, start=11.2, outcome="unknown"),
        attempt(4, CUT, start=11.5),
    ]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert verdict.per_second == {0: (2, 1, 2), 1: (0, 0, 2)}
    assert verdict.availability == 0.5


def test_an_owner_lost_rerun_is_accepted_where_on_owner_lost_is_release() -> None:
    history = [attempt(1, CUT, end=12.0), attempt(2, start=13, end=13.1, execution="x2", body="b2")]
    ran = [execution(1), execution(2, at=13.05, caused_by="a2")]
    killed = [Fault("gateway-stop", "gateway 0", 10.5, 14.0)]
    owner_lost = {route: "release" for route in POLICIES}
    verdict = check(history, ran, killed, POLICIES, owner_lost=owner_lost)
    assert verdict.violations == []
    assert verdict.explained == {"owner lost: gateway 0 paused mid-call": 1}


def test_a_rerun_after_a_lost_master_is_never_accepted() -> None:
    history = [
        attempt(1, 503, route="release"),
        attempt(2, route="release", start=13, end=13.1, execution="x2", body="b2"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=13.05)]
    failover = [Fault("redis-kill", "master :7000 (failover)", 11.0, 12.0)]
    verdict = check(history, ran, failover, POLICIES)
    assert rules(verdict) == [1]
    assert "a claim lost with a Redis master" in verdict.violations[0].what


def test_a_rerun_after_a_502_is_the_release_policys_even_during_a_failover() -> None:
    """The key's call ran, was cut upstream, answered 502 and released, as the route asks:
    a failover around it is not what made it run again."""
    history = [
        attempt(1, 502, route="release"),
        attempt(2, route="release", start=13, end=13.1, execution="x2", body="b2"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=13.05, caused_by="a2")]
    failover = [Fault("redis-failover", "master :7000 -> :7001", 9.0, 14.0)]
    verdict = check(history, ran, failover, POLICIES)
    assert verdict.violations == []
    assert verdict.explained == {"unknown outcome released: the gateway answered 502": 1}


def test_a_502_explains_no_rerun_it_did_not_release_before() -> None:
    """A 502 explains a rerun only where the key's call ran, was answered so and released
    before it: not the rerun's own 502 after a claim lost with the master, nor a lost
    owner's key held unknown (502 with Idempotency-Outcome: unknown)."""
    own = [
        attempt(1, CUT, route="release", end=12.0),
        attempt(2, 502, route="release", start=13, end=13.1),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=13.05, caused_by="a2")]
    failover = [Fault("redis-failover", "master :7000 -> :7001", 9.0, 14.0)]
    verdict = check(own, ran, failover, POLICIES)
    assert rules(verdict) == [1]
    assert "a claim lost with a Redis master" in verdict.violations[0].what
    held = [
        attempt(1, CUT, route="release", end=12.0),
        attempt(2, 502, route="release", start=12.5, end=12.6, gateway=1, outcome="unknown"),
        attempt(3, route="release", start=13, end=13.1, gateway=1, execution="x2", body="b2"),
    ]
    ran = [execution(1, route="release"), execution(2, route="release", at=13.05, caused_by="a3")]
    killed = [Fault("gateway-kill", "gateway 0", 10.5, 11.0)]
    owner_lost = {route: "record" for route in POLICIES}
    verdict = check(held, ran, killed, POLICIES, owner_lost=owner_lost)
    assert rules(verdict) == [1]
    assert "owner lost: gateway 0 killed mid-call" in verdict.violations[0].what


def test_keys_held_unknown_are_counted_by_the_fault_on_their_attempts() -> None:
    history = [attempt(1, 502, start=10, end=11, outcome="unknown", gateway=0)]
    cut_off = [
        Fault("upstream-blackhole", "gateway 0 <-> upstream", 10.5, 12),
        Fault("gateway-kill", "gateway 1", 10.5, 12),  # another gateway: not this key's
    ]
    verdict = check(history, [], cut_off, POLICIES)
    assert verdict.held_unknown == 1
    assert verdict.unknown_causes == {"during upstream-blackhole": 1}


def test_an_unknown_outcome_after_a_2xx_is_a_lost_acknowledged_outcome() -> None:
    history = [attempt(1), attempt(2, 502, start=12, end=12.1, outcome="unknown")]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [4]
    assert "answered 502 unknown" in verdict.violations[0].what


def test_a_replay_that_is_no_longer_the_2xx_is_a_lost_acknowledged_outcome() -> None:
    history = [attempt(1), attempt(2, 502, start=12, end=12.1)]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [4]
    assert "answered 502" in verdict.violations[0].what


def test_a_replay_that_hangs_or_is_cut_with_no_fault_on_is_a_lost_acknowledged_outcome() -> None:
    for status in (TIMED_OUT, CUT):
        history = [attempt(1), attempt(2, status, start=12, end=15)]
        verdict = check(history, [execution(1)], [], POLICIES)
        assert rules(verdict) == [4]
        assert "no answer" in verdict.violations[0].what


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
        assert check(hung, ran, [fault], POLICIES).violations == []
    refused = [attempt(1), attempt(2, REFUSED, start=12, end=12.01)]
    assert check(refused, ran, [], POLICIES).violations == []
    long_after = [Fault("gateway-stop", "gateway 0", 5.0, 9.9)]  # 2.1 s before it started
    hung = [attempt(1), attempt(2, TIMED_OUT, start=12, end=15)]
    assert rules(check(hung, ran, long_after, POLICIES)) == [4]


def test_a_replay_with_another_status_line_is_reported() -> None:
    history = [attempt(1), attempt(2, 200, start=11, end=11.1, reason="OK")]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [10]
    assert "200 OK where the first 2xx (a1) was 201 Created" in verdict.violations[0].what
    reworded = [attempt(1), attempt(2, start=11, end=11.1, reason="Payment Created")]
    assert rules(check(reworded, [execution(1)], [], POLICIES)) == [10]


def test_a_replay_without_its_recorded_headers_is_reported() -> None:
    history = [
        attempt(1),
        attempt(2, start=11, end=11.1),
        attempt(3, start=12, end=12.1, head="h2"),  # the body intact, a header gone
    ]
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [10]
    assert "other headers than the first 2xx (a1)" in verdict.violations[0].what


def test_a_fenced_answer_says_it_is_not_the_record_and_is_held_to_its_body_only() -> None:
    """A stale owner's answer marked `Idempotency-Outcome: fenced` tells its client that the
    record holds another claim's answer (a reconciled one: the lookup's body, the gateway's
    own head): the first 2xx that the replays are held to is the first one not so marked."""
    history = [
        attempt(1, outcome="fenced", head="upstream's", end=11.0),
        attempt(2, start=10.5, end=10.9, outcome="reconciled", head="gateway's"),
        attempt(3, start=12, end=12.1, outcome="reconciled", head="gateway's"),
    ]
    assert check(history, [execution(1)], [], POLICIES).violations == []


def test_a_409_or_503_after_a_2xx_only_says_later_while_it_is_stored_or_redis_is_down() -> None:
    soon = [attempt(1), attempt(2, 409, start=11, end=11.1)]
    assert check(soon, [execution(1)], [], POLICIES).violations == []
    down = [attempt(1), attempt(2, 503, start=30, end=30.1)]
    redis_down = [Fault("redis-kill", "redis :7000", 29.0, 29.5)]
    assert check(down, [execution(1)], redis_down, POLICIES).violations == []
    for status in (409, 503):
        late = [attempt(1), attempt(2, status, start=30, end=30.1)]
        assert rules(check(late, [execution(1)], [], POLICIES)) == [4]


def test_another_payload_after_a_2xx_may_be_refused() -> None:
    history = [attempt(1), attempt(2, 422, start=12, end=12.1, payload="p2")]
    assert check(history, [execution(1)], [], POLICIES).violations == []


def test_the_same_payload_refused_as_another_is_reported() -> None:
    history = [attempt(1, 422), attempt(2, 422, start=11, end=11.1)]
    verdict = check(history, [], [], POLICIES)
    assert rules(verdict) == [7]
    assert "the same payload refused as another" in verdict.violations[0].what


def test_a_shared_key_answered_with_another_tenants_execution_is_reported() -> None:
    history = [attempt(1), attempt(2, tenant="t1", start=11, end=11.1)]  # the same payload
    verdict = check(history, [execution(1)], [], POLICIES)
    assert rules(verdict) == [3]


def test_the_liveness_floor_fails_a_run_that_forwards_nothing() -> None:
    refused = [attempt(n, 503, key=f"k{n}", start=10 + n, end=10.1 + n) for n in range(20)]
    verdict = check(refused, [], [], POLICIES, floor=Floor(share_2xx=0.5, rate=1.0))
    assert rules(verdict) == [8, 8]
    assert verdict.availability == 1.0  # what rule 5 alone would have called fine
    served = [attempt(n, key=f"k{n}", execution=f"x{n}", body=f"b{n}", start=10 + n,
                      end=10.1 + n) for n in range(20)]  # fmt: skip
    ran = [execution(n, key=f"k{n}", caused_by=f"a{n}", at=10.05 + n) for n in range(20)]
    assert check(served, ran, [], POLICIES, floor=Floor(share_2xx=0.5, rate=1.0)).violations == []


def test_the_floor_counts_only_attempts_with_no_fault_on() -> None:
    refused = [attempt(n, 503, key=f"k{n}", start=10 + n, end=10.1 + n) for n in range(10)]
    served = [attempt(n, key=f"k{n}", execution=f"x{n}", body=f"b{n}", start=30 + n,
                      end=30.1 + n) for n in range(10, 20)]  # fmt: skip
    ran = [execution(n, key=f"k{n}", caused_by=f"a{n}", at=30.05 + n) for n in range(10, 20)]
    down = [Fault("redis-kill", "redis :7000", 9.0, 19.5)]
    verdict = check([*refused, *served], ran, down, POLICIES, floor=Floor(0.9, 0.1))
    assert verdict.quiet_2xx == (10, 10)
    assert verdict.violations == []


def test_what_the_harness_found_wrong_with_the_run_is_rule_9() -> None:
    verdict = check([attempt(1)], [execution(1)], [], POLICIES, untrusted=["client 0 exit 1"])
    assert rules(verdict) == [9]


# A fail_mode: open route forwards without idempotency while Redis is cut off: a key may run
# once more there, by the attempt so answered (Idempotency-Degraded), and by no other.
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


def open_runs() -> list[Execution]:
    return [execution(1, route="open"), execution(2, route="open", at=13.05, caused_by="a2")]


def test_a_rerun_forwarded_as_degraded_while_redis_was_down_is_counted_not_reported() -> None:
    """Neither a second execution (rule 1), one after a 2xx (rule 4), nor a second body and
    head (rules 2 and 10): the degraded answer was never the key's claim's."""
    verdict = check(open_history(), open_runs(), REDIS_DOWN, POLICIES, fails_open=OPEN)
    assert verdict.violations == []
    assert verdict.explained == {
        "degraded: forwarded without idempotency while Redis was cut off (fail_mode: open)": 1
    }
    assert verdict.degraded == 1


def test_a_degraded_rerun_still_answers_its_own_key_tenant_and_payload() -> None:
    history = open_history()
    history[1] = history[1]._replace(body="b1")  # the first execution's body: not its own
    verdict = check(history, open_runs(), REDIS_DOWN, POLICIES, fails_open=OPEN)
    assert rules(verdict) == [2]
    assert "differs from its execution" in verdict.violations[0].what


def test_a_rerun_on_the_open_route_with_no_degraded_attempt_is_reported() -> None:
    """Redis down, but the second execution's attempt was answered from a claim (no
    Idempotency-Degraded): the key's claim did not hold."""
    verdict = check(open_history(degraded=""), open_runs(), REDIS_DOWN, POLICIES, fails_open=OPEN)
    assert 1 in rules(verdict)
    assert "executed 2 times" in next(v.what for v in verdict.violations if v.rule == 1)


def test_a_degraded_rerun_with_redis_not_cut_off_is_reported() -> None:
    """Marked degraded with no Redis fault on (a gateway that cannot read what Redis holds,
    say), on the attempt's own gateway (another's link cut off), or long after one."""
    for faults in (
        [],
        [Fault("redis-blackhole", "gateway 1 <-> redis", 12.5, 14.0)],
        [Fault("redis-stop", "redis :7000", 5.0, 10.9)],  # ended 2.1 s before it started
        [Fault("gateway-stop", "gateway 0", 12.5, 14.0)],  # not Redis
    ):
        verdict = check(open_history(), open_runs(), faults, POLICIES, fails_open=OPEN)
        assert 1 in rules(verdict), faults
        assert "with Redis not cut off" in verdict.violations[0].what
    cut_off = [Fault("redis-blackhole", "gateway 0 <-> redis", 12.5, 14.0)]
    assert check(open_history(), open_runs(), cut_off, POLICIES, fails_open=OPEN).violations == []


def test_a_degraded_answer_explains_nothing_on_a_route_that_fails_closed() -> None:
    history = [a._replace(route="record") for a in open_history()]
    ran = [e._replace(route="record") for e in open_runs()]
    verdict = check(history, ran, REDIS_DOWN, POLICIES, fails_open=OPEN)
    assert 1 in rules(verdict)


def test_two_degraded_runs_and_no_claim_are_one_key_run_twice_without_idempotency() -> None:
    history = [
        attempt(1, route="open", start=12.6, end=12.7, degraded="true"),
        attempt(2, route="open", start=13, end=13.1, execution="x2", body="b2", head="h2",
                degraded="true"),
    ]  # fmt: skip
    ran = [execution(1, route="open", at=12.65), execution(2, route="open", at=13.05,
                                                            caused_by="a2")]  # fmt: skip
    verdict = check(history, ran, REDIS_DOWN, POLICIES, fails_open=OPEN)
    assert verdict.violations == []
    assert sum(verdict.explained.values()) == 1


# On a loaded host Redis may answer slower than a gateway's socket_timeout with no fault on:
# the gateway's calls time out, its breaker opens, and the open route fails open, as the
# contract lets it. Its log says so, and that explains the degraded rerun; a gateway that
# has just stood still says nothing of Redis by failing open, and its rerun stays wrong.
FAILED_OPEN = "redis unavailable, route open fails open: TimeoutError: "


def said(*lines: tuple[int, float, str], earlier: tuple[int, ...] = ()) -> Gateways:
    """The gateways' log lines (gateway, time, text), and the earlier release's gateways."""
    by_gateway: dict[int, list[LogLine]] = {}
    for gateway, at, msg in lines:
        by_gateway.setdefault(gateway, []).append(LogLine(at, msg))
    return Gateways(by_gateway, earlier)


def test_a_degraded_rerun_is_explained_by_its_gateways_logged_fail_open() -> None:
    """No fault on: gateway 1 logged that the open route failed open during the attempt
    (Redis slower than its socket timeout): counted, not reported, by rules 1, 2, 4, 10."""
    for msg in (FAILED_OPEN, "redis unavailable, route open fails open: Redis circuit is open"):
        gateways = said((1, 13.04, msg))
        verdict = check(
            open_history(gateway=1), open_runs(), [], POLICIES, fails_open=OPEN, gateways=gateways
        )
        assert verdict.violations == [], msg
        assert verdict.explained == {DEGRADED_LOGGED: 1}


def test_a_degraded_rerun_with_no_fault_and_no_fail_open_logged_is_reported() -> None:
    """No line, or one of another gateway, another route, or not during the attempt."""
    for gateways in (
        said(),
        said((0, 13.04, FAILED_OPEN)),
        said((1, 13.04, FAILED_OPEN.replace("route open", "route record"))),
        said((1, 12.5, FAILED_OPEN), (1, 13.5, FAILED_OPEN)),
        said((1, 13.04, "redis unavailable, route open this gateway stood still: TimeoutError")),
    ):
        verdict = check(
            open_history(gateway=1), open_runs(), [], POLICIES, fails_open=OPEN, gateways=gateways
        )
        assert rules(verdict) == [1, 2, 4, 10], gateways.fails_open
        assert "with Redis not cut off" in verdict.violations[0].what


# Gateway 1 stood still until 11.5 s (or was killed and back by then): its degraded rerun at
# 13 s comes within the lease (2 s) and AFTER_FAULT (2 s) of its wake.
STOOD_STILL = [
    [Fault("gateway-stop", "gateway 1", 6.0, 11.5)],
    [Fault("gateway-kill", "gateway 1", 10.5, 11.5)],
]


def test_a_degraded_rerun_right_after_its_gateway_stood_still_is_reported() -> None:
    """This release answers 503 there: its breaker opened on timers that ran out while it
    slept, and says nothing of Redis."""
    for faults in STOOD_STILL:
        verdict = check(
            open_history(gateway=1), open_runs(), faults, POLICIES, fails_open=OPEN,
            gateways=said((1, 13.04, FAILED_OPEN)),
        )  # fmt: skip
        assert 1 in rules(verdict), faults
        assert "after its gateway stood still" in verdict.violations[0].what
        assert verdict.earlier_stalls == []
    # Past the lease and AFTER_FAULT, the fail-open is Redis's again; and a longer lease
    # keeps it the stall's.
    later = [Fault("gateway-stop", "gateway 1", 6.0, 8.9)]
    args = (open_history(gateway=1), open_runs(), later, POLICIES)
    gateways = said((1, 13.04, FAILED_OPEN))
    assert check(*args, fails_open=OPEN, gateways=gateways).violations == []
    verdict = check(*args, fails_open=OPEN, gateways=gateways, leases={"open": 4.0})
    assert 1 in rules(verdict)


def test_a_degraded_rerun_after_an_earlier_release_gateway_stood_still_is_counted_apart() -> None:
    """In a mixed fleet, the earlier release's known defect (fixed in this one): reported
    apart from the violations; on this release's gateway beside it, still a violation."""
    for faults in STOOD_STILL:
        gateways = said((1, 13.04, FAILED_OPEN), earlier=(1,))
        verdict = check(
            open_history(gateway=1), open_runs(), faults, POLICIES, fails_open=OPEN,
            gateways=gateways,
        )  # fmt: skip
        assert verdict.violations == [], faults
        assert len(verdict.earlier_stalls) == 1
        assert "after its gateway stood still" in verdict.earlier_stalls[0].what
        assert verdict.explained == {}
        gateways = said((1, 13.04, FAILED_OPEN), earlier=(0,))
        verdict = check(
            open_history(gateway=1), open_runs(), faults, POLICIES, fails_open=OPEN,
            gateways=gateways,
        )  # fmt: skip
        assert 1 in rules(verdict) and verdict.earlier_stalls == []


def held_through_stop() -> tuple[list[Attempt], list[Execution], list[Fault]]:
    """A call held by gateway 1 through its stop (8.5-13 s): its client timed out at 11.5 s
    and retried on gateway 0, which ran the key at 11.6 s and answered 201; gateway 1 woke
    and ran the held call at 13.05 s, after logging that the route failed open."""
    history = [
        attempt(1, TIMED_OUT, route="open", start=8.6, end=11.5, gateway=1),
        attempt(2, route="open", start=11.55, end=11.7, execution="x1"),
    ]
    ran = [
        execution(1, route="open", at=11.6, caused_by="a2"),
        execution(2, route="open", at=13.05, caused_by="a1"),
    ]
    return history, ran, [Fault("gateway-stop", "gateway 1", 8.5, 13.0)]


def test_a_call_held_through_a_stall_and_run_failing_open_is_the_stalls() -> None:
    """No attempt holds the marker (its client was gone): the gateway's log says the route
    failed open as it woke. A violation on this release, counted apart on the earlier."""
    history, ran, faults = held_through_stop()
    logged = ((1, 6.0, FAILED_OPEN), (1, 13.02, FAILED_OPEN))
    verdict = check(history, ran, faults, POLICIES, fails_open=OPEN, gateways=said(*logged))
    assert rules(verdict) == [1, 4]
    assert all("after its gateway stood still" in v.what for v in verdict.violations)
    verdict = check(
        history, ran, faults, POLICIES, fails_open=OPEN, gateways=said(*logged, earlier=(1,))
    )
    assert verdict.violations == []
    assert [v.key for v in verdict.earlier_stalls] == ["open/t0/k1"]
    # Run as it woke with no fail-open logged then (its claim's call), it is no degraded
    # forward: a claim run twice, whichever release.
    verdict = check(
        history, ran, faults, POLICIES, fails_open=OPEN, gateways=said(logged[0], earlier=(1,))
    )
    assert rules(verdict) == [1, 4] and verdict.earlier_stalls == []
    assert "paused mid-call" in verdict.violations[0].what


def test_a_gateways_log_lines_are_read_with_their_times() -> None:
    text = (
        '{"ts":"2026-11-28T23:14:20.363Z","level":"warning","logger":"x","msg":"' + FAILED_OPEN
        + '"}\nTraceback (most recent call last):\n{"ts": 3, "msg": "x"}\n{"msg": "no time"}\n'
    )  # fmt: skip
    assert log_lines(text) == [LogLine(1795907660.363, FAILED_OPEN)]
