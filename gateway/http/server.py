"""Serving the application on a bound socket, as aiohttp's `run_app` does, with every client
connection guarded by the limits of `http.limits`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable

from aiohttp import web

from gateway.http.app import CONNECTIONS
from gateway.http.limits import fit_open_files

log = logging.getLogger(__name__)


class _GuardedSite(web.SockSite):
    """aiohttp's site for a bound socket, its protocol factory wrapped by `Connections`.

    It sets the site's private `_server` (what `stop` closes) as `SockSite.start` does:
    tests/test_limits.py and tests/test_slowloris.py fail when that stops working."""

    def __init__(self, runner: web.AppRunner, sock: socket.socket, backlog: int) -> None:
        super().__init__(runner, sock, backlog=backlog)
        self._app_runner = runner
        self._listening = sock
        self._queue = backlog

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._app_runner.server
        assert server is not None
        protocols = self._app_runner.app[CONNECTIONS].guard(server)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            protocols, sock=self._listening, backlog=self._queue
        )


async def _serve(
    app: web.Application,
    sock: socket.socket,
    backlog: int,
    shutdown_timeout: float,
    listening: Callable[[str], None],
) -> None:
    short = fit_open_files(app[CONNECTIONS].limits)
    if short is not None:
        log.warning("%s", short)
    runner = web.AppRunner(
        app, handle_signals=True, access_log=None, shutdown_timeout=shutdown_timeout
    )
    await runner.setup()
    try:
        site = _GuardedSite(runner, sock, backlog)
        await site.start()
        listening(site.name)
        while True:
            await asyncio.sleep(3600)
    finally:
        await runner.cleanup()
        app[CONNECTIONS].close()


def run(
    app: web.Application,
    sock: socket.socket,
    backlog: int,
    shutdown_timeout: float,
    listening: Callable[[str], None],
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Serve until SIGINT or SIGTERM, then drain for up to `shutdown_timeout` seconds."""
    main = loop.create_task(_serve(app, sock, backlog, shutdown_timeout, listening))
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
