"""Serving the application on a bound socket, as aiohttp's `run_app` does, with every client
connection guarded by the limits of `http.server.limits`.

The application's one route catches every path, so its router and match info are skipped:
aiohttp's low-level server hands each request straight to the application's handler
(`ENTRY`). The application still starts, drains and cleans up as under `run_app`, and its
`on_response_prepare` signal still runs on every answer (the request id, aiohttp's own
error answers included)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable
from typing import Any, cast

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.typedefs import Handler
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_urldispatcher import _default_expect_handler

from gateway import closing
from gateway.http.answers.problems import INTERNAL_ERROR, MALFORMED_REQUEST
from gateway.http.server.access import request_id
from gateway.http.server.limits import Connections, fit_open_files
from gateway.telemetry.requestlog import REQUEST_ID

log = logging.getLogger(__name__)

# What an application served here names (`http.app` sets both): every request's handler,
# which the site calls straight, and the guard of its client connections.
ENTRY: web.AppKey[Handler] = web.AppKey("entry")
CONNECTIONS = web.AppKey("connections", Connections)


class _ProblemHandler(RequestHandler):
    """aiohttp's protocol for one connection, whose own error answers are problem+json with
    a request id, as the gateway's are, and never repeat the request's bytes (aiohttp's
    text answer quotes the line it refused). The connection then closes lingering
    (`Connections.close_lingering`), so that a client still sending reads its answer."""

    def __init__(self, *args: Any, connections: Connections, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connections = connections
        self._refused = False

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        plain = super().handle_error(request, status, exc, message)  # its log line
        # aiohttp's own error answers: a request its parser refuses, a handler that failed
        answer = (MALFORMED_REQUEST if plain.status < 500 else INTERNAL_ERROR).answer()
        # A request that reached the handler gets its own id back as the answer is prepared.
        answer.headers[REQUEST_ID] = request_id(request)
        answer.force_close()  # as aiohttp's: nothing more is read from this connection
        self._refused = True
        return answer

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        finished = await super().finish_response(request, resp, start_time)
        transport = self.transport
        if self._refused and transport is not None:
            self.transport = None  # closed here, not by aiohttp as its loop ends
            self._connections.close_lingering(transport)
        return finished

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """A client that hung up mid-request is no server error: the access log has its line
        (status 499, docs/production.md), so aiohttp's traceback for it goes to debug."""
        if isinstance(kw.get("exc_info"), ConnectionError) and self._client_gone():
            self.logger.debug(*args, **kw)
            return
        super().log_exception(*args, **kw)

    def _client_gone(self) -> bool:
        return self.transport is None or self.transport.is_closing()


class GuardedSite(web.SockSite):
    """aiohttp's site for a bound socket, its protocol factory wrapped by `connections`
    (the public listener's, or the admin listener's: `ops.admin_limits`).

    It sets the site's private `_server` (what `stop` closes) as `SockSite.start` does:
    tests/test_limits.py and tests/test_slowloris.py fail when that stops working."""

    def __init__(
        self,
        runner: web.AppRunner,
        sock: socket.socket,
        backlog: int,
        connections: Connections,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(runner, sock, backlog=backlog, ssl_context=tls)
        self._app_runner = runner
        self._connections = connections
        self._listening = sock
        self._queue = backlog
        self._tls = tls

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._app_runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        kwargs = server._kwargs  # what aiohttp's own factory passes (`Server.__call__`)
        connections = self._connections
        protocols = connections.guard(
            lambda: _ProblemHandler(server, connections=connections, loop=loop, **kwargs),
            tls=self._tls is not None,
        )
        if self._tls is None:
            self._server = await loop.create_server(
                protocols, sock=self._listening, backlog=self._queue
            )
            return
        # The handshake comes before the head, and has the head's time of its own. A closing
        # connection sends the rest of its answer and close_notify, then waits for the
        # client's close_notify: as long as a client may take nothing that is written to it
        # (the loop's default is 30 s, after which what is still buffered is dropped).
        limits = connections.limits
        self._server = await loop.create_server(
            protocols,
            sock=self._listening,
            backlog=self._queue,
            ssl=self._tls,
            ssl_handshake_timeout=limits.request_header_timeout,
            ssl_shutdown_timeout=limits.client_write_timeout,
        )


def _direct(app: web.Application, server: web.Server) -> None:
    """Let `server` hand each request to the application's handler, not to its router."""
    loop = asyncio.get_running_loop()
    handle = app[ENTRY]

    class Served(web.Request):
        """A request that no router matched: its application is `app`.

        `_prepare_hook` is aiohttp's (private) hook into `StreamResponse.prepare`, where a
        routed request sends `on_response_prepare`, and `_default_expect_handler` is the
        router's answer to `Expect`: tests/test_served.py (through a gateway process) fails
        when either stops working."""

        @property
        def app(self) -> web.Application:
            return app

        async def _prepare_hook(self, response: web.StreamResponse) -> None:
            await app.on_response_prepare.send(self, response)

    def request(
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.Request:
        return Served(message, payload, protocol, writer, task, loop)

    async def serve(request: web.BaseRequest) -> web.StreamResponse:
        served = cast(web.Request, request)  # made by `request` above
        if request.headers.get(hdrs.EXPECT):  # as the router does: 100 Continue, or 417
            await _default_expect_handler(served)
        return await handle(served)

    server.request_factory = request
    server.request_handler = serve


async def start_site(
    runner: web.AppRunner, sock: socket.socket, backlog: int, tls: ssl.SSLContext | None = None
) -> web.SockSite:
    """Serve the set-up `runner`'s application on the bound `sock` (its requests straight to
    the handler, its connections guarded), as `run` does; the tests' gateways too."""
    assert runner.server is not None
    _direct(runner.app, runner.server)
    site = GuardedSite(runner, sock, backlog, runner.app[CONNECTIONS], tls)
    await site.start()
    return site


async def _serve(
    app: web.Application,
    sock: socket.socket,
    backlog: int,
    shutdown_timeout: float,
    listening: Callable[[str], None],
    tls: ssl.SSLContext | None,
) -> None:
    short = fit_open_files(app[CONNECTIONS].limits)
    if short is not None:
        log.warning("%s", short)
    runner = web.AppRunner(
        app, handle_signals=True, access_log=None, shutdown_timeout=shutdown_timeout
    )
    async with contextlib.AsyncExitStack() as opened:
        opened.callback(closing.close, "the client connections", app[CONNECTIONS].close)
        # Before the start: a start that fails exits what it entered of the cleanup contexts.
        opened.push_async_callback(closing.aclose, "the application", runner.cleanup)
        await runner.setup()
        site = await start_site(runner, sock, backlog, tls)
        listening(site.name)
        while True:
            await asyncio.sleep(3600)


def run(
    app: web.Application,
    sock: socket.socket,
    backlog: int,
    shutdown_timeout: float,
    listening: Callable[[str], None],
    loop: asyncio.AbstractEventLoop,
    tls: ssl.SSLContext | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM, then drain for up to `shutdown_timeout` seconds;
    HTTPS with `tls`."""
    main = loop.create_task(_serve(app, sock, backlog, shutdown_timeout, listening, tls))
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            if not main.done():
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(main)
        finally:
            _cancel(asyncio.all_tasks(loop), loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _cancel(tasks: set[asyncio.Task[object]], loop: asyncio.AbstractEventLoop) -> None:
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
