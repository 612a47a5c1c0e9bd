"""The operators' console on the admin listener: a static page, its script and its styles
(package data, nothing fetched from elsewhere) and the JSON it reads.

Every answer carries a Content-Security-Policy that allows the page's own script and styles
and nothing else (no inline script, no framing); key data is never cached. The page sends the
admin token as a bearer header, never in a URL.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Awaitable, Callable

from aiohttp import web

STATIC = importlib.resources.files("gateway.ops") / "static"
FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
# Where the JSON of the page lives, besides the /keys endpoints.
API = "/console/api/"


async def _static(request: web.Request) -> web.Response:
    name = request.match_info.get("name") or "index.html"
    if name not in FILES:
        raise web.HTTPNotFound()
    body = (STATIC / name).read_bytes()
    return web.Response(body=body, headers={"Content-Type": FILES[name]})


async def _to_console(request: web.Request) -> web.Response:
    raise web.HTTPFound("/console/")


@web.middleware
async def secured(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every admin answer: the console's security headers; no caching of anything but the
    page's own files (key data, readiness and metrics are read fresh)."""
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        response = exc
    response.headers.update(SECURITY_HEADERS)
    static = request.path.startswith("/console/") and not request.path.startswith(API)
    response.headers["Cache-Control"] = "no-cache" if static else "no-store"
    if isinstance(response, web.HTTPException):
        raise response
    return response


def add_pages(app: web.Application) -> None:
    """The page and its files; the JSON routes are added by whoever serves the data."""
    app.middlewares.append(secured)
    app.router.add_get("/", _to_console)
    app.router.add_get("/console", _to_console)
    app.router.add_get("/console/", _static)
    app.router.add_get("/console/{name}", _static)
