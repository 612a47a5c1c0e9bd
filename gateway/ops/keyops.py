"""Operators' work on one record: find it, describe it, purge it, settle one that cannot be
read, resolve an UNKNOWN outcome.

Shared by `idem-gateway keys ...` and the admin listener's /keys endpoints. None of them runs
a key again unasked: a record the gateway cannot read is settled as an UNKNOWN outcome (never
purged to get rid of it), and a purge of a record whose request ran says so and waits for a
confirmation before it deletes anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Final, Literal

from gateway.config.policy import Route
from gateway.config.settings import Settings
from gateway.core.keys import BadKey, digest, parse_key, record_names, route_of_name, tenant_id
from gateway.core.record import STATE_COMPLETED, STATE_PENDING, STATE_UNKNOWN, Record
from gateway.errors import StoreUnavailable
from gateway.store import attention
from gateway.store.store import Store, Stored

STATES: Final = {STATE_PENDING: "pending", STATE_COMPLETED: "completed", STATE_UNKNOWN: "unknown"}
CORRUPT: Final = "?"  # `Stored.state` of a record that cannot be read
# The states of a record whose request ran upstream (or may have: one that cannot be read).
RAN: Final = (STATE_COMPLETED, STATE_UNKNOWN, CORRUPT)
RUNS_AGAIN: Final = "its request ran upstream: a retry after the purge runs it again"
# What a retry of a settled record gets, as the CLI and the console say it.
SETTLED: Final = (
    "retries get 502 outcome-unknown (Idempotency-Outcome: unknown) until its retention "
    "ends or it is resolved; the upstream is not called again"
)
# A record's names (format 1's and format 2's), or its one name twice: where to look for it.
Names = tuple[str, str]


class KeyOpProblem(StrEnum):
    """Why a key operation was refused (docs/problems.md)."""

    NO_SUCH_ROUTE = "no-such-route"
    NO_RECORD = "no-record"
    NOT_UNKNOWN = "record-not-unknown"
    NOT_CORRUPT = "record-not-corrupt"
    CHANGED = "record-changed"
    UNCONFIRMED = "purge-unconfirmed"
    BAD_VALUE = "bad-key-operation"


# The problem of a refused key operation, by status, unless it names its own.
_BY_STATUS: Final = {
    400: KeyOpProblem.BAD_VALUE,
    404: KeyOpProblem.NO_RECORD,
    409: KeyOpProblem.NOT_UNKNOWN,
}


class KeyOpError(Exception):
    """The operation cannot be done; `status` is the HTTP status that says why and `slug`
    the problem type."""

    def __init__(
        self, status: Literal[400, 404, 409], message: str, problem: KeyOpProblem | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.slug = str(problem or _BY_STATUS[status])


def locate(
    settings: Settings, route_name: str, tenant: Sequence[str], key: str
) -> tuple[Route, Names]:
    """The route and the record's Redis keys (in either format) for a client's key.

    `tenant` holds the values of the route's `scope` headers as the client sends them, in
    order; missing ones count as absent headers, exactly as the gateway hashes them.
    """
    route = next((r for r in settings.routes if r.name == route_name), None)
    if route is None:
        names = ", ".join(r.name for r in settings.routes) or "none"
        raise KeyOpError(
            404, f"no route named {route_name!r} (routes: {names})", KeyOpProblem.NO_SUCH_ROUTE
        )
    if len(tenant) > len(route.scope):
        raise KeyOpError(
            400,
            f"route {route.name!r} has {len(route.scope)} scope header(s) "
            f"({', '.join(route.scope)}); {len(tenant)} tenant values given",
        )
    try:
        parsed = parse_key([key])
    except BadKey as exc:
        raise KeyOpError(400, f"bad key: {exc}") from None
    assert parsed is not None
    values = [*tenant, *([None] * (len(route.scope) - len(tenant)))]
    prefix = settings.redis.key_prefix
    return route, record_names(prefix, route.name, tenant_id(values), digest(parsed))


def located(settings: Settings, record: str) -> tuple[Route, Names]:
    """The route and Redis key of a record named by its own id, the Redis key the console's
    attention list shows (either format's: `prefix:{route:tenant-digest:key-digest}` or
    `prefix:route:{tag}digest`): its digests are all there is to it, the raw key and tenant
    are not needed."""
    name = route_of_name(settings.redis.key_prefix, record)
    if name is None:
        raise KeyOpError(400, f"record {record!r} is not a record's id (prefix:...{{...}})")
    route = next((r for r in settings.routes if r.name == name), None)
    if route is None:
        raise KeyOpError(
            404, f"record {record!r}: no route named {name!r}", KeyOpProblem.NO_SUCH_ROUTE
        )
    return route, (record, record)


def describe(stored: Stored) -> dict[str, Any]:
    """A record's state, age, time left, status and sizes (never its body or tenant)."""
    if stored.key is None:
        return {"state": "absent"}
    now = time.time()
    pttl_ms, fields = stored.pttl_ms, stored.fields
    state = STATES.get(stored.state, "corrupt")
    out: dict[str, Any] = {"state": state, "ttl_seconds": pttl_ms / 1000 if pttl_ms >= 0 else None}
    if state == "corrupt":  # as the store reads it: record-corrupt
        return out
    try:
        if b"c" in fields:
            out["age_seconds"] = round(now - int(fields[b"c"]) / 1000, 3)
        if state == "pending":
            out.update(_lease(fields, pttl_ms, now))
        if b"o" in fields:  # requests that took it over from a lost owner so far
            out["taken_over"] = int(fields[b"o"])
    except ValueError:
        return {"state": "corrupt", "ttl_seconds": out["ttl_seconds"]}
    record = stored.record
    if record is not None:
        if "age_seconds" not in out:  # format 2 keeps no claim time: its answer's age
            out["age_seconds"] = round(now - record.completed_at, 3)
        out.update(
            status=record.status,
            body_bytes=record.size,
            inline_bytes=stored.inline_bytes,
            blob=record.blob,
            completed_seconds_ago=round(now - record.completed_at, 3),
            format=stored.format,
        )
        if record.extra:
            out["extra"] = record.extra
    return out


def _lease(fields: dict[bytes, bytes], pttl_ms: int, now: float) -> dict[str, Any]:
    """A PENDING key's lease: the time left, or how long ago it ended unrenewed (its owner
    lost: the next claim settles it by the route's `on_owner_lost`)."""
    if b"l" not in fields:  # a claim with no lease end of its own: its TTL is its lease
        return {"lease_seconds_left": pttl_ms / 1000 if pttl_ms >= 0 else None}
    left = round(int(fields[b"l"]) / 1000 - now, 3)
    sent = b"u" not in fields  # routes with mark_sent: not yet marked means never sent
    if left > 0:
        return {"lease_seconds_left": left, "maybe_sent": sent}
    return {"state": "owner-lost", "lease_ended_seconds_ago": -left, "maybe_sent": sent}


async def show(store: Store, names: Names) -> dict[str, Any]:
    return describe(await store.inspect(*names))


async def purge(store: Store, names: Names, confirmed: bool, confirm_with: str) -> str:
    """Delete the record in whatever state: the next request with the key runs upstream.
    A record whose request ran (completed, unknown, or one that cannot be read) only when
    `confirmed`: otherwise KeyOpError 409 says what the purge would cost and how to confirm
    it (`confirm_with`), and nothing is deleted. The name it was held under (KeyOpError 404
    when there was none)."""
    stored = await store.inspect(*names)
    if stored.key is None:
        raise KeyOpError(404, "no record for this key")
    if stored.state in RAN and not confirmed:
        raise KeyOpError(
            409,
            f"the record is {_name(stored.state)}: {RUNS_AGAIN}; purge it with {confirm_with}",
            KeyOpProblem.UNCONFIRMED,
        )
    if not await store.purge(*names):
        raise KeyOpError(404, "no record for this key")
    return stored.key


async def settle(store: Store, prefix: str, route: Route, names: Names) -> str:
    """Settle a record the gateway cannot read as an UNKNOWN outcome, kept for the route's
    retention: it never runs again, retries get 502 outcome-unknown, and it joins the
    attention list for a person to resolve with what really happened. The name it is held
    under; KeyOpError when there is none (404), when it can be read (409), or when it changed
    while it was settled (409: nothing was written)."""
    stored = await store.inspect(*names)
    if stored.state != CORRUPT:  # as the claim reads it: record-corrupt
        raise _not_corrupt(stored.state)
    assert stored.key is not None  # absent is not corrupt
    if not await store.settle_unreadable(stored.key, route.retention):
        now = await store.inspect(*names)
        if now.state != CORRUPT:
            raise _not_corrupt(now.state)
        raise KeyOpError(
            409,
            "the record changed while it was settled; nothing was written: look at it again",
            KeyOpProblem.CHANGED,
        )
    with contextlib.suppress(StoreUnavailable):  # an index only: the record is settled
        await attention.note(store, prefix, route.name, stored.key, route.retention)
    return stored.key


async def resolve_by_purge(store: Store, names: Names) -> str:
    """Delete an UNKNOWN outcome (or a lost owner's key) so the client's next retry runs
    upstream again; the name it was held under."""
    stored = await store.inspect(*names)
    if stored.state != STATE_UNKNOWN and describe(stored)["state"] != "owner-lost":
        raise _not_unknown(stored.state)
    assert stored.key is not None  # absent is not unknown
    await store.purge(stored.key)
    return stored.key


async def resolve_with(
    store: Store, route: Route, names: Names, status: int, body: bytes, content_type: str | None
) -> str:
    """Store the result an operator knows for an UNKNOWN outcome; retries replay it. The
    name the record is held under."""
    if not 200 <= status <= 599:  # a 1xx is never an answer's final status
        raise KeyOpError(400, f"{status} is not the status of a final answer (200 to 599)")
    if body and status in (204, 304):
        raise KeyOpError(400, f"a {status} answer has no body")
    if content_type is not None and not _header_value(content_type):
        raise KeyOpError(400, f"content type {content_type!r} is not a header value")
    record = Record(
        status=status,
        headers=[("Content-Type", content_type)] if content_type else [],
        size=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        completed_at=time.time(),
        extra={"resolved": "operator"},
    )
    stored = await store.inspect(*names)
    if stored.key is None or not await store.resolve(stored.key, record, body, route.retention):
        raise _not_unknown((await store.inspect(*names)).state)
    return stored.key


def _header_value(value: str) -> bool:
    """Printable Latin-1 (tabs allowed): a CR or LF would let one value write more header
    lines into every replay of the key."""
    return all(c == "\t" or (" " <= c <= "~") or ("\xa0" <= c <= "\xff") for c in value)


def _not_unknown(state: str) -> KeyOpError:
    """404 for a key with no record at all; 409 for a record in another state."""
    if not state:
        return KeyOpError(404, "no record for this key")
    return KeyOpError(409, f"the record holds no unknown outcome (state: {_name(state)})")


def _not_corrupt(state: str) -> KeyOpError:
    """404 for a key with no record at all; 409 for a record the gateway can read."""
    if not state:
        return KeyOpError(404, "no record for this key")
    return KeyOpError(
        409,
        f"the record is not corrupt (state: {_name(state)}): only a record the gateway "
        "cannot read is settled",
        KeyOpProblem.NOT_CORRUPT,
    )


def _name(state: str) -> str:
    return STATES.get(state, "corrupt")
