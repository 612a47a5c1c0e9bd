"""The checker proven able to fail: gateways broken on purpose (`loadtest.verify.broken`) make
`python -m loadtest.verify` exit 1 with the rule they break named, and what makes a run's
history untrustworthy fails it (rule 9).

The suite runs six breakages live: one per rule added last, and the two of a follower's
answer (a piece missed, another key's stream), each on the follow route alone (the full
set, with the controls, is `python -m loadtest.verify.blind`, recorded in
docs/verification.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.verify.blind import run_one
from loadtest.verify.broken import BREAKAGES
from loadtest.verify.harness import Plan, distrust, stalls
from loadtest.verify.history import Fault, read_attempts

SECONDS = 4  # of each broken run; `run_one` gives it 120 s more to start, stop and be judged


# Longer than `run_one`'s own deadline, so that its end is seen: a run took 70 s of the 90
# given before, beside other work (gateways, Redis, clients and the checker each start).
@pytest.mark.timeout(SECONDS + 120 + 30)
@pytest.mark.parametrize(
    "breakage",
    [
        "replay-502", "retry-422", "forwards-nothing", "replay-headless",
        "follower-misses-chunk", "follower-other-stream",
    ],
)  # fmt: skip
def test_a_broken_gateway_fails_the_run_with_the_rule_it_breaks(
    breakage: str, tmp_path: Path
) -> None:
    seen = run_one(breakage, seconds=SECONDS, seed=5, workdir=tmp_path)
    assert seen.code == 1, seen.output
    assert seen.rules & set(BREAKAGES[breakage].rules), seen.output
    assert "verify: FAILED" in seen.output


def plan(**given: object) -> Plan:
    return Plan(
        seconds=10, gateways=2, client_procs=2, concurrency=4, routes=["record"], kinds=[],
        each=1, seed=1, **given,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_crashed_client_and_a_fault_never_made_make_a_run_untrustworthy() -> None:
    stopped = {
        "clients": [0, 1],
        "planned": {"redis-kill": 2, "gateway-stop": 1},
        "skipped": {"redis-kill": "failed: TimeoutError()"},
    }
    made = [Fault("redis-kill", "redis :7000", 1.0, 2.0), Fault("gateway-stop", "gateway 0", 3, 4)]
    assert distrust(plan(), stopped, made) == [
        "client process 1 exited 1",
        "redis-kill: made 1 of 2 times (failed: TimeoutError())",
    ]


def test_a_journal_fault_the_host_cannot_make_fails_only_when_asked_for_by_name() -> None:
    stopped = {
        "clients": [0],
        "planned": {"journal-full": 1},
        "skipped": {"journal-full": "mount refused: permission denied"},
    }
    assert distrust(plan(), stopped, []) == []
    assert distrust(plan(faults_given=True), stopped, []) == [
        "journal-full: made 0 of 1 times (mount refused: permission denied)"
    ]


def test_a_breakages_own_stall_is_a_fault_of_the_gateway_it_hit(tmp_path: Path) -> None:
    made = tmp_path / "stalls.tsv"
    assert stalls(made, {8001: 0, 8002: 1}) == []
    made.write_text("100.5\t105.0\t8002\n")
    assert stalls(made, {8001: 0, 8002: 1}) == [Fault("gateway-stall", "gateway 1", 100.5, 105.0)]


def test_an_attempt_keeps_its_status_line_and_head_and_older_lines_read(tmp_path: Path) -> None:
    older = "a1\to1\tfirst\trecord\tt0\tk1\tp1\t0\t1.0\t1.1\t201\t\tb1\tx1\t\n"
    history = tmp_path / "attempts-0.tsv"
    history.write_text(older + older.replace("\t\n", "\t\tPayment\\tCreated\th1\n"))
    old, new = read_attempts(history)
    assert (old.reason, old.head) == ("", "")
    assert (new.reason, new.head, new.code) == ("Payment\\tCreated", "h1", "")


def test_an_unreadable_history_line_is_reported_not_skipped(tmp_path: Path) -> None:
    good = "a1\to1\tfirst\trecord\tt0\tk1\tp1\t0\t1.0\t1.1\t201\t\tb1\tx1\t\n"
    history = tmp_path / "attempts-0.tsv"
    history.write_text(good + "a2\to1\tretry\trecord\tt0\n" + good.replace("201", "2O1"))
    unreadable: list[str] = []
    assert [a.attempt for a in read_attempts(history, unreadable)] == ["a1"]
    assert unreadable == [
        "attempts-0.tsv line 2 unreadable (5 fields)",
        "attempts-0.tsv line 3 unreadable (invalid literal for int() with base 10: '2O1')",
    ]
