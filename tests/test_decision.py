"""The pure decision functions, without I/O."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.config.policy import Policy
from gateway.core.claims import Claim, ClaimResult
from gateway.core.decision import (
    Action,
    Failure,
    Settle,
    may_still_send,
    on_answer,
    on_claim,
    on_failure,
)
from gateway.core.record import Record

DONE = ClaimResult(Claim.DONE, record=Record(200, [], 0, ""))
UNKNOWN = ClaimResult(Claim.DONE, record=Record(502, [], 0, "", unknown=True))


@pytest.mark.parametrize(
    ("result", "policy", "may_wait", "action"),
    [
        (ClaimResult(Claim.CLAIMED), Policy(), True, Action.FORWARD),
        (ClaimResult(Claim.MISMATCH), Policy(), True, Action.MISMATCH),
        (ClaimResult(Claim.IN_FLIGHT, 100), Policy(), True, Action.CONFLICT),
        (ClaimResult(Claim.IN_FLIGHT, 100), Policy(on_in_flight="wait"), True, Action.WAIT),
        (ClaimResult(Claim.IN_FLIGHT, 100), Policy(on_in_flight="wait"), False, Action.CONFLICT),
        (DONE, Policy(), True, Action.REPLAY),
        (UNKNOWN, Policy(), True, Action.REPLAY_UNKNOWN),
    ],
)
def test_on_claim(result: ClaimResult, policy: Policy, may_wait: bool, action: Action) -> None:
    assert on_claim(result, policy, may_wait) is action


def test_a_waiter_that_finds_the_key_free_gives_it_back_rather_than_running_the_call() -> None:
    wait = Policy(on_in_flight="wait")
    assert on_claim(ClaimResult(Claim.CLAIMED), wait, False, waited=True) is Action.UNRECORDED
    assert on_claim(ClaimResult(Claim.IN_FLIGHT, 5), wait, False, waited=True) is Action.CONFLICT
    assert on_claim(DONE, wait, False, waited=True) is Action.REPLAY


def test_on_answer_follows_the_record_policy() -> None:
    policy = Policy()
    assert on_answer(201, policy) is Settle.RECORD
    assert on_answer(404, policy) is Settle.RECORD
    assert on_answer(429, policy) is Settle.RELEASE
    assert on_answer(500, policy) is Settle.RELEASE


@pytest.mark.parametrize(
    ("kind", "mode", "settle"),
    [
        (Failure.UNSENT, "record", Settle.RELEASE),
        (Failure.UNSENT, "keep", Settle.RELEASE),
        (Failure.TIMEOUT, "release", Settle.RELEASE),
        (Failure.TIMEOUT, "keep", Settle.KEEP),
        (Failure.BROKEN, "record", Settle.RECORD_UNKNOWN),
    ],
)
def test_on_failure(kind: str, mode: str, settle: Settle) -> None:
    assert on_failure(kind, Policy(on_unknown_outcome=mode)) is settle


def test_records_and_claim_results_keep_every_field_and_stay_frozen() -> None:
    """Their constructors set the fields themselves (cheaper than a frozen dataclass's: the
    slots' setters pure, native stores compiled): every field must still land on either
    build, defaults included, and no instance may be changed."""
    full = Record(201, [("A", "b")], 3, "d", "blob", 1.5, True, {"body": "x"}, "Made")
    assert [getattr(full, f.name) for f in dataclasses.fields(Record)] == [
        201, [("A", "b")], 3, "d", "blob", 1.5, True, {"body": "x"}, "Made",
    ]  # fmt: skip
    one, two = Record(200, [], 0, ""), Record(200, [], 0, "")
    assert one == two and one.extra == {} and one.extra is not two.extra
    assert (one.blob, one.completed_at, one.unknown, one.reason) == (None, 0.0, False, None)
    assert dataclasses.replace(full, size=4) == Record(
        201, [("A", "b")], 4, "d", "blob", 1.5, True, {"body": "x"}, "Made"
    )
    assert Record.decode(full.encode()) == full
    result = ClaimResult(Claim.DONE, pttl_ms=5, record=full, body=b"abc")
    assert (result.outcome, result.pttl_ms, result.record, result.body) == (
        Claim.DONE, 5, full, b"abc",
    )  # fmt: skip
    assert ClaimResult(Claim.CLAIMED) == ClaimResult(Claim.CLAIMED, 0, None, b"")
    for instance, name in ((full, "size"), (result, "body")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(instance, name, None)


@pytest.mark.parametrize(
    ("elapsed", "lease", "sends"),
    [(0.0, 30.0, True), (14.9, 30.0, True), (15.0, 30.0, False), (40.0, 30.0, False)],
)
def test_a_claim_is_sent_only_within_the_first_half_of_its_lease(
    elapsed: float, lease: float, sends: bool
) -> None:
    assert may_still_send(elapsed, lease) is sends
