"""problem+json (RFC 9457) answers: the gateway's own errors, one `type` per reason."""

from __future__ import annotations

import orjson
from aiohttp import web

PROBLEM_TYPE = "application/problem+json"


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """A problem+json response; `slug` names the problem type and is its stable `code`.
    `detail` is for people and never names internal classes or addresses (those go to the
    log, under the request id)."""
    response = web.Response(
        status=status, body=problem_body(status, slug, title, detail), headers=headers
    )
    response.content_type = PROBLEM_TYPE
    return response


def problem_body(status: int, slug: str, title: str, detail: str) -> bytes:
    """The problem+json document itself."""
    return orjson.dumps(
        {
            "type": f"urn:idem-gateway:problem:{slug}",
            "title": title,
            "status": status,
            "detail": detail,
            "code": slug,
        }
    )
