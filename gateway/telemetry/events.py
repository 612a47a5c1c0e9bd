"""What the gateway did that a reader of its log must tell apart, as a closed set of names.

Each such line carries the name in its `event` field, with the route, the request id of the
request it befell (the client's `X-Request-Id` where it sent a sane one) and what else the
event says, so that a log reader (an operator's query, `loadtest.verify`'s checker) goes by
fields, never by a message's wording, which may change.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from gateway.telemetry.logs import FIELDS
from gateway.telemetry.requestlog import current


class Event(StrEnum):
    # Redis could not be asked: the request forwarded without idempotency (`fail_mode: open`).
    FAILED_OPEN = "failed-open"
    # Redis could not be asked: 503 (`fail_mode: closed`).
    FAILED_CLOSED = "failed-closed"
    # Redis could not be asked for a request this process held through a stall of its own
    # (stopped, starved): 503 whatever the fail mode, its client may have retried elsewhere.
    HELD_THROUGH_STALL = "held-through-stall"
    # The same for a request come in less than a lease after such a stall.
    AFTER_STALL = "after-stall"
    # A lost owner's key settled; `settled` says how (`core.decision.LostStep`).
    OWNER_LOST = "owner-lost"
    # A call sent upstream got no whole answer (a timeout, a reset): its outcome is unknown,
    # settled as the route's `on_unknown_outcome` says (`failure` says which).
    UNKNOWN_OUTCOME = "unknown-outcome"
    # The stalled-owner guard: a claim half a lease old before its first byte; not sent.
    NOT_SENT_LATE = "not-sent-late"


EVENT: Final = "event"


def event_fields(event: Event, route: str, **more: str) -> dict[str, object]:
    """The `extra` of a log call that says `event` befell the current request on `route`."""
    info = current()
    fields: dict[str, object] = {EVENT: event.value, "route": route}
    if info is not None:
        fields["request_id"] = info.request_id
    fields.update(more)
    return {FIELDS: fields}
