"""A listener's TLS certificate, replaceable while it serves.

The listening socket keeps the context it was started with; that context's SNI callback (which
OpenSSL runs on every ClientHello, with or without a server name) hands each new handshake the
newest context. A reload builds a whole new context from the files, so a file that does not
load leaves the running one in place; connections already open keep the certificate they
were given. Every context is built from the same settings, so only the files differ.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Final

from aiohttp import web

from gateway.config.server_tls import Loaded, ServerTls, server_context
from gateway.errors import ConfigError
from gateway.telemetry.metrics import Metrics

log = logging.getLogger(__name__)

# A certificate this close to its end is warned of when loaded, and once a day after.
EXPIRY_WARNING: Final = 14 * 86400.0
# How often a running listener looks at its certificate's end.
EXPIRY_CHECK: Final = 3600.0


class Certificates:
    """The certificate of one listener (`name`: `listen` or `admin`)."""

    def __init__(self, name: str, settings: ServerTls, first: ServerTls | None = None) -> None:
        """`first`: the same settings naming copies of the files to start with, those the
        gateway serves with (`ops.supervisor.serving`), loaded even when expired since; reloads read
        `settings`' files."""
        self.name = name
        self.settings = settings
        try:  # loaded when the config was validated; the files may have gone since
            loaded = server_context(first or settings, expired_ok=first is not None)
        except ValueError as exc:
            raise ConfigError(f"{name}.tls: {exc}") from None
        self._current = loaded
        self._serving = loaded.context  # the context the listening socket holds
        self._serving.sni_callback = self._newest
        self._warned: int | None = None  # the days left last said
        self.warn_of_expiry()

    @property
    def context(self) -> ssl.SSLContext:
        """The context to listen with."""
        return self._serving

    @property
    def expires(self) -> float:
        """When the certificate given to new connections expires (epoch seconds)."""
        return self._current.expires

    def reload(self) -> bool:
        """Load the files again; new connections get them. False, and one log line, when
        they do not load: the certificate in use stays."""
        try:
            loaded: Loaded = server_context(self.settings)
        except ValueError as exc:
            log.error("%s.tls: reload refused, the certificate in use stays: %s", self.name, exc)
            return False
        self._current = loaded
        cert = self.settings.cert
        log.info(
            "%s.tls: certificate reloaded from %s (expires %s)", self.name, cert, _when(loaded)
        )
        self._warned = None
        self.warn_of_expiry()
        return True

    def warn_of_expiry(self, now: float | None = None) -> None:
        """Say, once a day, that the certificate in use ends within EXPIRY_WARNING, or has
        ended: a worker started after it has ended still serves it (as its siblings do),
        but clients refuse it."""
        left = self.expires - (time.time() if now is None else now)
        if left > EXPIRY_WARNING:
            self._warned = None
            return
        days = int(left // 86400)
        if days == self._warned:
            return
        self._warned = days
        when, cert = _when(self._current), self.settings.cert
        if left <= 0:
            log.error(
                "%s.tls: the certificate in use (%s) expired on %s: clients refuse it; "
                "rotate it and send SIGHUP",
                self.name,
                cert,
                when,
            )
        else:
            log.warning(
                "%s.tls: the certificate in use (%s) expires on %s, in %d days: rotate it",
                self.name,
                cert,
                when,
                days,
            )

    async def watch_expiry(self, interval: float = EXPIRY_CHECK) -> None:
        while True:
            await asyncio.sleep(interval)
            self.warn_of_expiry()

    def files(self) -> tuple[tuple[int, int, int], ...]:
        """What the files are now: a change shows a rotation (`file_states`)."""
        return file_states((self.settings.cert, self.settings.key, self.settings.client_ca))

    async def watch(self, interval: float) -> None:
        """Reload whenever the files change, looking every `interval` seconds; files that do
        not load are said once, and tried again at their next change."""
        seen = self.files()
        while True:
            await asyncio.sleep(interval)
            now = self.files()
            if now != seen:
                seen = now
                self.reload()

    def _newest(self, tls: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: object) -> None:
        if tls.context is not self._current.context:
            tls.context = self._current.context
        return None


def file_states(paths: Iterable[str | None]) -> tuple[tuple[int, int, int], ...]:
    """What the files are now (inode, size, modification time; following symlinks, as a
    mounted Kubernetes Secret swaps its files by a symlink): a change shows a rotation."""
    found = []
    for path in paths:
        try:
            status = os.stat(path) if path else None
        except OSError:  # gone for now: a change, loaded (or refused) when it is back
            status = None
        if status is None:
            found.append((0, 0, 0))
        else:
            found.append((status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(found)


def _when(loaded: Loaded) -> str:
    return datetime.fromtimestamp(loaded.expires).astimezone().isoformat(timespec="seconds")


# Every TLS listener of a gateway process, by name: the SIGHUP reload replaces theirs.
LISTENER_TLS = web.AppKey("listener_tls", dict[str, Certificates])


def attach_tls(
    app: web.Application,
    name: str,
    settings: ServerTls,
    metrics: Metrics,
    first: ServerTls | None = None,
) -> Certificates:
    """The certificates of `app`'s listener `name`, reloaded with the config and watched by
    the expiry metric and log. Call before `app` starts; ConfigError when the files do not
    load. `first`: as `Certificates` takes it."""
    certificates = Certificates(name, settings, first)
    if LISTENER_TLS not in app:
        app[LISTENER_TLS] = {}
    app[LISTENER_TLS][name] = certificates
    metrics.watch_certificate(name, lambda: certificates.expires)
    interval = settings.watch_interval

    async def watching(app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.ensure_future(certificates.watch_expiry())]
        if interval is not None:
            tasks.append(asyncio.ensure_future(certificates.watch(interval)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    app.cleanup_ctx.append(watching)
    return certificates


def reload_certificates(app: web.Application) -> None:
    """Reload every TLS listener's files (SIGHUP); each says how it went in one line."""
    for certificates in app.get(LISTENER_TLS, {}).values():
        certificates.reload()
