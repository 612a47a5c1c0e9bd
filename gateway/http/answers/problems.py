"""problem+json (RFC 9457) answers: the gateway's own errors, one `type` per reason."""

from __future__ import annotations

from typing import Final

import orjson
from aiohttp import web

PROBLEM_TYPE: Final = "application/problem+json"

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


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> web.Response:
    """A problem+json response; `slug` names the problem type and is its stable `code`
    unless `code` is given (`code_for`). `detail` is for people and never names internal
    classes or addresses (those go to the log, under the request id)."""
    response = web.Response(
        status=status, body=problem_body(status, slug, title, detail, code), headers=headers
    )
    response.content_type = PROBLEM_TYPE
    return response


def problem_body(status: int, slug: str, title: str, detail: str, code: str | None = None) -> bytes:
    """The problem+json document itself."""
    return orjson.dumps(
        {
            "type": f"urn:idem-gateway:problem:{slug}",
            "title": title,
            "status": status,
            "detail": detail,
            "code": code or slug,
        }
    )
