"""The pure decision functions, without I/O."""

from __future__ import annotations

import pytest

from gateway.config.policy import Policy
from gateway.core.claims import Claim, ClaimResult
from gateway.core.decision import (
    Action,
    Failure,
    Settle,
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
