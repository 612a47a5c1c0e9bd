"""The checker's closed sets: why a rule was broken (`Reason`, each of one rule), and why a key
ran once more (`Cause`, and which policy accepts it). A verdict, a test or a report goes by
these members, never by the words of a message."""

from __future__ import annotations

from enum import Enum


class Reason(Enum):
    """What a violation says: its rule, and its words (the detail of a case comes apart)."""

    RAN_MORE_THAN_ONCE = (1, "executed more than once")
    BODIES_DIFFER = (2, "2xx bodies differ")
    NAMES_NO_EXECUTION = (2, "a 2xx names no execution")
    DIFFERS_FROM_ITS_EXECUTION = (2, "a 2xx differs from its execution")
    CUT_NOT_ITS_START = (2, "a 2xx cut short is not the start of its execution's body")
    ANOTHER_KEYS_ANSWER = (3, "a 2xx carries another key's answer")
    ANOTHER_PAYLOADS_ANSWER = (3, "a 2xx answers another payload")
    RAN_AFTER_A_2XX = (4, "ran again after a 2xx")
    OTHER_ANSWER_AFTER_A_2XX = (4, "answered otherwise after a 2xx")
    NO_ANSWER_AFTER_A_2XX = (4, "no answer after a 2xx, with no fault on")
    ANSWERED_500 = (6, "answers with status 500")
    TRACEBACK_LOGGED = (6, "a traceback in a gateway's log")
    LOGGED_500 = (6, "a 500 in a gateway's access log")
    UNCLEAN_EXIT = (6, "a gateway's exit at the final SIGTERM")
    SAME_PAYLOAD_REFUSED = (7, "the same payload refused as another")
    FEW_2XX = (8, "too few 2xx with no fault on")
    FEW_EXECUTIONS = (8, "too few executions per second")
    UNTRUSTED = (9, "the run cannot be trusted")
    OTHER_STATUS_LINE = (10, "a replay with another status line")
    OTHER_HEADERS = (10, "a replay with other headers")
    MARKED_OTHERWISE = (10, "a 2xx marked a replay or not otherwise than it came")

    def __init__(self, rule: int, words: str) -> None:
        self.rule = rule
        self.words = words


class Accepts(Enum):
    """Which route policy lets an extra run of a key stand."""

    NOTHING = "no policy"
    UNKNOWN_RELEASED = "on_unknown_outcome: release"
    OWNER_LOST_RELEASED = "on_owner_lost: release"
    FAILS_OPEN = "fail_mode: open"  # a call forwarded without idempotency runs beside claims


class Cause(Enum):
    """Why a key ran once more, as the history shows it, and which policy accepts it."""

    OWNER_LOST_RERUN = (
        "owner lost: run again as the route says (the gateway's owner-lost event, or "
        "Idempotency-Outcome: rerun)",
        Accepts.OWNER_LOST_RELEASED,
    )
    OWNER_STOOD_STILL = (
        "owner lost: its gateway (of the earlier release, whose log says nothing of it) was "
        "killed or paused mid-call",
        Accepts.OWNER_LOST_RELEASED,
    )
    OWNER_LOST_NOT_HAPPENED = (
        "owner lost: run as its lookup said it had not happened, and it had",
        Accepts.NOTHING,
    )
    UPSTREAM_FAILED_AFTER = (
        "unknown outcome released: the upstream reset or hung after executing",
        Accepts.UNKNOWN_RELEASED,
    )
    UNKNOWN_OUTCOME_LOGGED = (
        "unknown outcome released: an earlier call's gateway logged its outcome unknown (a "
        "timeout or reset after sending), its client told so or gone",
        Accepts.UNKNOWN_RELEASED,
    )
    ANSWERED_502_504 = (
        "unknown outcome released: the gateway answered 502 or 504",
        Accepts.UNKNOWN_RELEASED,
    )
    MASTER_LOST = (
        "a claim lost with a Redis master (asynchronous replication)",
        Accepts.NOTHING,
    )
    DEGRADED_CUT_OFF = (
        "degraded: forwarded without idempotency while Redis was cut off (fail_mode: open)",
        Accepts.FAILS_OPEN,
    )
    DEGRADED_LOGGED = (
        "degraded: forwarded without idempotency, its gateway logged failing open with no "
        "fault on (a Redis call timed out, or its circuit was open)",
        Accepts.FAILS_OPEN,
    )
    DEGRADED_NOT_CUT_OFF = (
        "forwarded without idempotency (Idempotency-Degraded) with Redis not cut off, and no "
        "fail-open in its gateway's log",
        Accepts.NOTHING,
    )
    DEGRADED_UNTOLD = (
        "forwarded without idempotency, as its gateway logged, with its client not told "
        "(no Idempotency-Degraded came back: its retry may run the call)",
        Accepts.NOTHING,
    )
    DEGRADED_AFTER_STALL = (
        "forwarded without idempotency after its gateway stood still",
        Accepts.NOTHING,
    )
    UNEXPLAINED = ("unexplained", Accepts.NOTHING)

    def __init__(self, words: str, accepts: Accepts) -> None:
        self.words = words
        self.accepts = accepts
