"""The gateway's own exceptions and its problem+json (RFC 9457) answers."""

from __future__ import annotations

import orjson
from aiohttp import web

PROBLEM_TYPE = "application/problem+json"


class ConfigError(Exception):
    """The configuration is invalid; the message names the field and what was expected."""


class StoreUnavailable(Exception):
    """Redis could not be asked or did not answer: the claim's state is unknown."""


class RecordCorrupt(Exception):
    """A stored record cannot be read: never a reason to forward (not even fail-open)."""


class BlobError(Exception):
    """The blob store failed: a body is missing, does not match its record, or cannot be
    written. `reason` is one of the names below (also the metrics label)."""

    MISSING = "missing"
    CORRUPT = "corrupt"  # size or digest differ from the record
    UNAVAILABLE = "unavailable"  # the store did not answer
    WRITE = "write"

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A problem+json response; `slug` names the problem type."""
    body = orjson.dumps(
        {
            "type": f"urn:idem-gateway:problem:{slug}",
            "title": title,
            "status": status,
            "detail": detail,
        }
    )
    response = web.Response(status=status, body=body, headers=headers)
    response.content_type = PROBLEM_TYPE
    return response
