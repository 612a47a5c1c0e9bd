"""What the claim script answers: the key's state as the request found it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Final

from gateway.core.record import Record, field_setters, native


class Claim(Enum):
    CLAIMED = "CLAIMED"  # absent before: this request owns the key now
    IN_FLIGHT = "IN_FLIGHT"  # another request owns it
    MISMATCH = "MISMATCH"  # the key was used with another payload
    DONE = "DONE"  # completed: the record is here
    # Its owner stopped renewing the lease (a gateway killed or frozen mid-call):
    UNSENT = "UNSENT"  # ... before sending (the route marks sends): this request owns it now
    TAKEN = "TAKEN"  # ... after it may have sent: this request owns it and must settle it
    LOST = "LOST"  # ... after it may have sent, and the route keeps such keys: left as is


# The claim script's first reply as it comes from Redis: a dict lookup costs a tenth of the
# Enum's call, which is kept for anything else (its ValueError names a reply it cannot read).
# A record of format 2 is RECORD, DONE as well.
_BY_REPLY: Final = {**{claim.value.encode(): claim for claim in Claim}, b"RECORD": Claim.DONE}


def lease_end_readable(raw: bytes | None) -> bool:
    """A PENDING hash's lease end as lua/claim.lua reads it: absent (a claim of an earlier
    release, whose TTL is its lease) or a finite number; anything else is damage, and the
    claim answers record-corrupt (whether its owner lives cannot be told)."""
    if raw is None:
        return True
    try:
        return math.isfinite(float(raw))
    except ValueError:
        return False


def claim_of(reply: bytes) -> Claim:
    """The Claim the script's first reply names."""
    return _BY_REPLY.get(reply) or Claim(reply.decode())


@dataclass(frozen=True, slots=True, init=False)
class ClaimResult:
    outcome: Claim
    pttl_ms: int = 0  # the lease left (IN_FLIGHT) or the retention left (DONE)
    record: Record | None = None
    body: bytes = b""  # the inline body of a DONE record
    key: str = ""  # the name that holds the key (a record's, in either format)
    lost: bytes = b""  # TAKEN: the lost owner's token, which an unknown outcome keeps

    def __init__(
        self,
        outcome: Claim,
        pttl_ms: int = 0,
        record: Record | None = None,
        body: bytes = b"",
        key: str = "",
        lost: bytes = b"",
    ) -> None:
        # One per request: set as `core.record.Record` explains.
        if _NATIVE:
            object.__setattr__(self, "outcome", outcome)
            object.__setattr__(self, "pttl_ms", pttl_ms)
            object.__setattr__(self, "record", record)
            object.__setattr__(self, "body", body)
            object.__setattr__(self, "key", key)
            object.__setattr__(self, "lost", lost)
            return
        _outcome(self, outcome)
        _pttl_ms(self, pttl_ms)
        _record(self, record)
        _body(self, body)
        _key(self, key)
        _lost(self, lost)


_NATIVE: Final = native(ClaimResult)
_outcome, _pttl_ms, _record, _body, _key, _lost = field_setters(
    ClaimResult, "outcome", "pttl_ms", "record", "body", "key", "lost"
)
