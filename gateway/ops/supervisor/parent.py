"""The parent of a `--workers N` gateway: it binds the port once, starts what the workers
share (the embedded Redis, the one admin listener, the copies of what they serve with) and
supervises them (`workers`)."""

from __future__ import annotations

import logging
from pathlib import Path

from gateway.config.settings import Settings
from gateway.ops.admin import admin_socket
from gateway.ops.listener import bind, start_listening
from gateway.ops.supervisor.admin_hub import Hub
from gateway.ops.supervisor.serving import Serving
from gateway.ops.supervisor.workers import Supervisor, worker_command
from gateway.store.embedded import EmbeddedRedis
from gateway.telemetry.logs import START_LINES

log = logging.getLogger("gateway")


def supervise(settings: Settings, config: str | None, workers: int) -> int:
    """Run `workers` gateway processes on the one socket bound here, sharing one embedded
    Redis if needed."""
    listen = settings.listen
    sock = bind(listen.host, listen.port, listen.reuse_port)
    sock.set_inheritable(True)
    embedded: EmbeddedRedis | None = None
    url: str | None = None  # the workers' Redis when the parent starts it
    if settings.redis.topology == "embedded":
        embedded = EmbeddedRedis(Path(settings.state_dir))
        embedded.start()
        url = embedded.url
    hub: Hub | None = None
    serving: Serving | None = None
    try:
        serving = Serving(settings.state_dir, config, settings)
        host, port = sock.getsockname()[:2]
        if settings.admin is not None:  # one admin address, the parent's, for every worker
            hub = Hub(settings.admin, settings.limits, workers, settings.state_dir)
            hub.start(admin_socket(settings.admin, public_address=(host, port)))
        start_listening(sock, listen.backlog)  # once it listens, so does the admin listener

        def said() -> None:  # said once the first worker serves: a refused start is one line
            START_LINES.release()
            if embedded is not None:
                log.info("embedded redis-server started for %d workers at %s", workers, url)
            scheme = "http" if listen.tls is None else "https"
            log.info("idem-gateway: %d workers on %s://%s:%d", workers, scheme, host, port)

        command = worker_command(config, url, sock.fileno())
        return Supervisor(command, workers, (sock.fileno(),), hub, serving).run(said)
    finally:
        sock.close()
        if hub is not None:
            hub.stop()
        if serving is not None:
            serving.close()
        if embedded is not None:
            embedded.close()
