"""The parent of a `--workers N` gateway: it binds the port once, starts what the workers
share (the embedded Redis, the one admin listener, the copies of what they serve with) and
supervises them (`workers`)."""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from gateway import closing
from gateway.config.settings import Settings
from gateway.ops.admin import admin_socket
from gateway.ops.listener import bind, inherited, start_listening
from gateway.ops.supervisor.admin_hub import Hub
from gateway.ops.supervisor.serving import Serving
from gateway.ops.supervisor.workers import Supervisor, worker_command
from gateway.store.embedded import EmbeddedRedis
from gateway.telemetry.logs import START_LINES

log = logging.getLogger("gateway")


def supervise(
    settings: Settings,
    config: str | None,
    workers: int,
    listen_fd: int | None = None,
    admin_fd: int | None = None,
) -> int:
    """Run `workers` gateway processes on the one socket bound here (or given: `listen_fd`,
    and the admin listener's `admin_fd`), sharing one embedded Redis if needed; what it
    opened is closed in reverse whichever step fails."""
    listen = settings.listen
    with contextlib.ExitStack() as opened:
        if listen_fd is not None:
            sock = inherited(listen_fd, "--listen-fd")
        else:
            sock = bind(listen.host, listen.port, listen.reuse_port)
        opened.callback(closing.close, "the listening socket", sock.close)
        sock.set_inheritable(True)
        given = inherited(admin_fd, "--admin-fd") if admin_fd is not None else None
        if given is not None:  # taken with the other one: closed whichever step fails next
            opened.callback(closing.close, "the admin socket", given.close)
        url: str | None = None  # the workers' Redis when the parent starts it
        if settings.redis.topology == "embedded":
            embedded = EmbeddedRedis(Path(settings.state_dir))
            opened.callback(closing.close, "the embedded redis-server", embedded.close)
            embedded.start()
            url = embedded.url
        serving = Serving(settings.state_dir, config, settings)
        opened.callback(closing.close, "the workers' copies of the config", serving.close)
        host, port = sock.getsockname()[:2]
        hub: Hub | None = None
        if settings.admin is not None:  # one admin address, the parent's, for every worker
            admin = admin_socket(settings.admin, public_address=(host, port), sock=given)
            opened.callback(closing.close, "the admin socket", admin.close)
            hub = Hub(settings.admin, settings.limits, workers, settings.state_dir)
            opened.callback(closing.close, "the admin listener", hub.stop)  # before its socket
            hub.start(admin)
        start_listening(sock, listen.backlog)  # once it listens, so does the admin listener

        def said() -> None:  # said once the first worker serves: a refused start is one line
            START_LINES.release()
            if url is not None:
                log.info("embedded redis-server started for %d workers at %s", workers, url)
            scheme = "http" if listen.tls is None else "https"
            log.info("idem-gateway: %d workers on %s://%s:%d", workers, scheme, host, port)

        command = worker_command(config, url, sock.fileno())
        return Supervisor(command, workers, (sock.fileno(),), hub, serving).run(said)
