"""The console in a real browser, for the tests that drive it: Debian's Chromium through
Playwright for Python (never `playwright install`: no browser is downloaded), a page that
keeps every console error and dialog it showed, and a gateway process in front of an
upstream on loopback that every request the page is tested on goes through.

A test module that imports this kit is skipped where Chromium or Playwright is missing. Its
fixtures (`start_gateway`, `console`, `shots`) are imported by name into the modules that
use them."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from testkit.polling import until
from testkit.procs import GatewayProcess

from .upstream import serving_app

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        "no Chromium binary (Debian's `chromium` package; .ci/run installs it as root)",
        allow_module_level=True,
    )
playwright = pytest.importorskip(
    "playwright.async_api", reason="Playwright for Python is not installed (the test extra)"
)
Page = playwright.Page
expect = playwright.expect

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN = "console-admin-token-0123456789"
XSS_BODY = b'<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>&lt;ok&gt;'
XSS_HEADER = '<b onmouseover="window.__xss=4">bold</b><script>window.__xss=5</script>'
WAIT_MS = 15_000


class ConsoleUpstream:
    """An upstream that counts its calls: `/pay` echoes the body it got, `/xss` answers HTML
    in its body and a header, `/reset` cuts its answer short (an unknown outcome), `/events`
    streams two events and its last once `go_on` is set."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.go_on = asyncio.Event()  # `/events` ends once set

    async def pay(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.calls[request.path] += 1
        text = f'{{"id":"pay_{self.calls[request.path]}","echo":"{body.decode()}"}}'
        return web.Response(status=201, text=text, content_type="application/json")

    async def xss(self, request: web.Request) -> web.Response:
        await request.read()
        self.calls[request.path] += 1
        headers = {"X-Note": XSS_HEADER, "Content-Type": "text/html"}
        return web.Response(status=200, body=XSS_BODY, headers=headers)

    async def reset(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.calls[request.path] += 1
        response = web.StreamResponse(status=200)
        response.content_length = 1000
        await response.prepare(request)
        await response.write(b"partial")
        assert request.transport is not None
        request.transport.abort()
        return response

    async def events(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.calls[request.path] += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"id: 1\ndata: one\n\n")
        await response.write(b"id: 2\ndata: two\n\n")
        async with asyncio.timeout(30):  # bounded: a test that never sets go_on ends anyway
            await self.go_on.wait()
        await response.write(b"id: 3\ndata: three\n\n")
        await response.write_eof()
        return response

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/pay", self.pay)
        app.router.add_post("/open", self.pay)
        app.router.add_post("/shadow", self.pay)
        app.router.add_post("/xss", self.xss)
        app.router.add_post("/reset", self.reset)
        app.router.add_post("/events", self.events)
        return app


Gateway = tuple[GatewayProcess, str, ConsoleUpstream]
StartGateway = Callable[..., Awaitable[Gateway]]


@pytest.fixture
async def start_gateway(redis_url: str, tmp_path: Path) -> AsyncIterator[StartGateway]:
    """Start a gateway process of `workers` workers with an admin listener and a token."""
    running: list[GatewayProcess] = []
    upstream = ConsoleUpstream()
    async with serving_app(upstream.app()) as origin:

        async def start(workers: int, redis: str | None = None) -> Gateway:
            """`redis`: a Redis of the test's own, to stop (the session's by default)."""
            config = {
                "redis": {"url": redis or redis_url, "breaker": {"failures": 1000}},
                "admin": {"token": TOKEN},  # on a port the GatewayProcess holds
                "routes": [
                    {"name": "payments", "path_prefix": "/pay", "upstream": origin},
                    {"name": "pages", "path_prefix": "/xss", "upstream": origin},
                    {
                        "name": "risky",
                        "path_prefix": "/reset",
                        "upstream": origin,
                        "on_unknown_outcome": "record",
                    },
                    {
                        "name": "lenient",
                        "path_prefix": "/open",
                        "upstream": origin,
                        "fail_mode": "open",
                    },
                    {
                        "name": "reports",
                        "path_prefix": "/events",
                        "upstream": origin,
                        "on_in_flight": "follow",
                    },
                    {
                        "name": "trial",
                        "path_prefix": "/shadow",
                        "upstream": origin,
                        "mode": "shadow",
                    },
                ],
            }
            gateway = GatewayProcess(config, tmp_path, args=["--workers", str(workers)])
            running.append(gateway)
            await asyncio.to_thread(gateway.start)
            admin = f"http://127.0.0.1:{gateway.admin_port}"
            await _until_ready(admin)
            return gateway, admin, upstream

        yield start
        for gateway in running:
            assert await asyncio.to_thread(gateway.stop) == 0


async def _until_ready(admin: str) -> None:
    async with aiohttp.ClientSession() as http:

        async def ready() -> bool:
            try:
                async with http.get(f"{admin}/readyz") as resp:
                    return resp.status == 200
            except aiohttp.ClientError:
                return False

        await until(ready, 20, "the gateway ready", every=0.05)


class Console:
    """A browser page on the console, with every console error and dialog it showed."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.responses: list[Any] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", self._dialog)
        page.on("response", lambda r: self.responses.append(r))

    async def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        await dialog.dismiss()

    async def open(self, admin: str, token: str | None = None) -> None:
        await self.page.goto(f"{admin}/console/")
        await expect(self.page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
        if token is not None:
            await self.page.fill("#token", token)
            await self.page.click("#token-use")
            await expect(self.page.locator("#keys-open")).to_be_visible(timeout=WAIT_MS)

    async def look_up(self, route: str, key: str) -> None:
        await self.page.select_option("#lookup-route", route)
        await self.page.fill("#lookup-key", key)
        await self.page.click("#lookup-go")

    async def confirm(self) -> None:
        await expect(self.page.locator("#confirm")).to_be_visible()
        await self.page.click("#confirm-yes")

    def cell(self, route: str, outcome: str) -> Any:
        return self.page.locator(f'tr[data-route="{route}"] td[data-outcome="{outcome}"]')


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where a test's screenshots go: IDEM_SCREENSHOTS, else its temporary folder."""
    folder = Path(os.environ.get("IDEM_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
async def console() -> AsyncIterator[Console]:
    async with playwright.async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            yield Console(await context.new_page())
        finally:
            await browser.close()


async def send(
    gateway: GatewayProcess, path: str, key: str, body: str = "{}", close: bool = False
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Idempotency-Key": key, "Content-Type": "application/json"}
    if close:
        headers["Connection"] = "close"  # a connection of its own: any worker may take it
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{gateway.url}{path}", data=body, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()
