"""problem+json (RFC 9457) answers: the gateway's own errors, one `type` per reason.

The catalogue below declares once each problem the gateway answers with: its status, its
slug (the `type`'s last part, and the stable `code`), its title, the `Retry-After` it carries
and any other header every answer of it carries, and the detail most of its answers give.
docs/problems.md describes each (tests/test_docs.py holds the two to the same slugs and
statuses). Code answers with an entry, `IN_FLIGHT.answer()`; a connection aiohttp never sees
is written `problem_body` and the entry's `headers`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import orjson
from aiohttp import web

from gateway.core.keys import KeyProblem
from gateway.core.scope import ScopeProblem

PROBLEM_TYPE: Final = "application/problem+json"
RETRY_AFTER: Final = "Retry-After"
# The header that says what became of the call an answer is about (`unknown`, `fenced`, ...).
OUTCOME: Final = "Idempotency-Outcome"

# `problem_codes: draft`: the `code` that clients written against the Idempotency-Key draft
# branch on; the `type` keeps the precise reason (docs/problems.md).
DRAFT_CODES: Final = {
    "empty-key": "invalid-key",
    "key-too-long": "invalid-key",
    "malformed-key": "invalid-key",
    "several-keys": "invalid-key",
    "conflicting-keys": "invalid-key",
    "key-reused": "fingerprint-mismatch",
}


def code_for(slug: str, vocabulary: str) -> str:
    """The `code` of the problem `slug` in a route's `problem_codes` vocabulary."""
    return DRAFT_CODES.get(slug, slug) if vocabulary == "draft" else slug


class Problem:
    """One problem type, as every answer of it carries it."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str = "",
        *,
        retry_after: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail  # for an answer that gives none of its own
        self.retry_after = retry_after  # seconds; None: no Retry-After
        fixed = dict(headers or {})
        if retry_after is not None:
            fixed[RETRY_AFTER] = str(retry_after)
        self.headers: Mapping[str, str] = fixed  # every answer's, in this order

    def answer(
        self,
        detail: str = "",
        *,
        code: str | None = None,
        replayed: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> web.Response:
        """The answer: `detail` (else the entry's own) is for people and never names
        internal classes or addresses (those go to the log, under the request id); `code`
        replaces the slug as the `code` (`code_for`). The headers go in this order: a
        replay's marker (`replayed`, for an answer given in place of a replay), the entry's
        own, then `headers`."""
        extra = self.headers
        if replayed or headers:
            extra = {**(replayed or {}), **extra, **(headers or {})}
        response = web.Response(
            status=self.status, body=_document(self, detail, code), headers=extra
        )
        response.content_type = PROBLEM_TYPE
        return response


# Bad input (nothing stored, upstream not called)
MISSING_KEY: Final = Problem(400, "missing-key", "Missing key")
EMPTY_KEY: Final = Problem(400, "empty-key", "Empty idempotency key")
KEY_TOO_LONG: Final = Problem(400, "key-too-long", "Idempotency key too long")
MALFORMED_KEY: Final = Problem(400, "malformed-key", "Malformed idempotency key")
SEVERAL_KEYS: Final = Problem(400, "several-keys", "Several idempotency keys")
CONFLICTING_KEYS: Final = Problem(400, "conflicting-keys", "Conflicting idempotency keys")
MISSING_SCOPE: Final = Problem(400, "missing-scope", "Missing tenant scope")
REPEATED_SCOPE_HEADER: Final = Problem(400, "repeated-scope-header", "Repeated scope header")
HOP_BY_HOP_SCOPE_HEADER: Final = Problem(
    400, "hop-by-hop-scope-header", "Scope or key header named by Connection"
)
BAD_HEADER: Final = Problem(400, "bad-header", "Undecodable header")
MALFORMED_REQUEST: Final = Problem(
    400,
    "malformed-request",
    "Malformed request",
    "the request is not valid HTTP/1.1 (its request line, framing or a header); nothing was "
    "forwarded",
)
INTERNAL_ERROR: Final = Problem(
    500,
    "internal-error",
    "Internal error",
    "the gateway could not handle the request; the log says why, under the request id",
)
TRANSFER_CODING: Final = Problem(501, "transfer-coding", "Unsupported transfer coding")
BODY_TOO_LARGE: Final = Problem(413, "body-too-large", "Body too large")
BODY_TIMEOUT: Final = Problem(408, "body-timeout", "Body too slow")
NO_ROUTE: Final = Problem(404, "no-route", "No route")

# The key's state (upstream not called)
IN_FLIGHT: Final = Problem(
    409,
    "in-flight",
    "Request in progress",
    "a request with this key is in progress; retry later",
    retry_after=1,
)
ENDED_UNRECORDED: Final = Problem(
    409,
    "ended-unrecorded",
    "Request ended without an answer",
    "the request with this key ended without a recorded answer; retry to run it",
    retry_after=1,
)
KEY_REUSED: Final = Problem(
    422,
    "key-reused",
    "Key reused with another payload",
    "this key was used with another request payload",
)

# Redis and the upstream
STORE_UNAVAILABLE: Final = Problem(
    503,
    "store-unavailable",
    "Idempotency store unavailable",
    "the request was not forwarded; retry later",
    retry_after=1,
)
TOO_MANY_CONNECTIONS: Final = Problem(
    503,
    "too-many-connections",
    "Too many connections",
    "the gateway is at its connection limit; retry later",
    retry_after=1,
)
UPSTREAM_UNREACHABLE: Final = Problem(
    502,
    "upstream-unreachable",
    "Upstream unreachable",
    "the upstream could not be reached; the request was not sent",
)
UPSTREAM_TIMEOUT: Final = Problem(
    504,
    "upstream-timeout",
    "Upstream timed out",
    "the upstream did not answer in time; whether it ran the request is unknown",
)
UPSTREAM_BROKEN: Final = Problem(
    502,
    "upstream-broken",
    "Upstream connection broken",
    "the connection to the upstream broke; whether it ran the request is unknown",
)
OUTCOME_UNKNOWN: Final = Problem(
    502,
    "outcome-unknown",
    "Outcome unknown",
    "the upstream was called but its outcome is unknown; an operator must resolve it",
    headers={OUTCOME: "unknown"},
)
LEASE_EXPIRED: Final = Problem(
    503,
    "lease-expired",
    "Held up past the key's lease",
    "the request was held up before it could be sent and was not forwarded; retry",
    retry_after=1,
)
_LOST: Final = (
    "the gateway that forwarded this request stopped before its outcome was stored; "
    "whether the upstream ran it is unknown, and it is not run again"
)
OWNER_LOST: Final = Problem(  # on_owner_lost: record
    502, "owner-lost", "Outcome unknown", _LOST, headers={OUTCOME: "unknown"}
)
OWNER_LOST_KEPT: Final = Problem(  # on_owner_lost: keep
    409, "owner-lost", "Outcome unknown", _LOST, retry_after=1, headers={OUTCOME: "unknown"}
)

# Replaying a recorded answer
ANSWER_HEADERS_TOO_LARGE: Final = Problem(
    502, "answer-headers-too-large", "Answer headers too large"
)
BODY_NOT_RECORDED: Final = Problem(502, "body-not-recorded", "Answer not replayable")
RECORDED_BODY_UNAVAILABLE: Final = Problem(
    502, "recorded-body-unavailable", "Recorded answer unavailable"
)
RECORD_CORRUPT: Final = Problem(
    502,
    "record-corrupt",
    "Recorded answer corrupt",
    "the stored record for this key cannot be read; the request is not run again",
)

# The admin listener's /keys endpoints and the console
ADMIN_TOKEN_UNSET: Final = Problem(
    403,
    "admin-token-unset",
    "Key endpoints disabled",
    "set admin.token to use the /keys endpoints",
)
UNAUTHORIZED: Final = Problem(
    401,
    "unauthorized",
    "Unauthorized",
    "a valid bearer token is required",
    headers={"WWW-Authenticate": 'Bearer realm="idem-gateway admin"'},
)
WORKERS_UNAVAILABLE: Final = Problem(
    503,
    "workers-unavailable",
    "No worker answers",
    "no worker of this gateway answers now; try again",
    retry_after=1,
)
BAD_ADMIN_REQUEST: Final = Problem(400, "bad-admin-request", "Bad request")
NO_SUCH_ROUTE: Final = Problem(404, "no-such-route", "Key operation refused")
NO_RECORD: Final = Problem(404, "no-record", "Key operation refused")
RECORD_NOT_UNKNOWN: Final = Problem(409, "record-not-unknown", "Key operation refused")
RECORD_NOT_CORRUPT: Final = Problem(409, "record-not-corrupt", "Key operation refused")
RECORD_CHANGED: Final = Problem(409, "record-changed", "Key operation refused")
PURGE_UNCONFIRMED: Final = Problem(409, "purge-unconfirmed", "Purge not confirmed")
BAD_KEY_OPERATION: Final = Problem(400, "bad-key-operation", "Key operation refused")

# The core's reasons a key or a tenant scope is refused, each its problem.
KEY_PROBLEMS: Final = {
    KeyProblem.EMPTY: EMPTY_KEY,
    KeyProblem.TOO_LONG: KEY_TOO_LONG,
    KeyProblem.MALFORMED: MALFORMED_KEY,
    KeyProblem.SEVERAL: SEVERAL_KEYS,
    KeyProblem.CONFLICTING: CONFLICTING_KEYS,
}
SCOPE_PROBLEMS: Final = {
    ScopeProblem.REPEATED: REPEATED_SCOPE_HEADER,
    ScopeProblem.HOP_BY_HOP: HOP_BY_HOP_SCOPE_HEADER,
    ScopeProblem.MISSING: MISSING_SCOPE,
}


def problem_body(kind: Problem, detail: str = "") -> bytes:
    """The problem+json document of an answer of `kind`, for a writer of raw bytes."""
    return _document(kind, detail)


def _document(kind: Problem, detail: str, code: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "type": f"urn:idem-gateway:problem:{kind.slug}",
            "title": kind.title,
            "status": kind.status,
            "detail": detail or kind.detail,
            "code": code or kind.slug,
        }
    )
