"""Reloading the config on SIGHUP: routes change for new requests, nothing is dropped.

Requests already running keep the route they started with. A file that does not validate is
refused and logged; the running config stays. Listener, limits, Redis, admin, loop, blob,
tracing and upstream TLS settings are bound at start: a change to them is logged and takes
effect only after a restart; a new `redis.key_prefix` is said with its cost, as a route gone
is (the records under the old one are no longer found from that restart on). The TLS
listeners load their certificate and key files again (the paths stay): new connections get
the new ones, open ones keep theirs.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from gateway.config.loading import load_settings, protects_nothing
from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.http.app import LIVE, SERVICES
from gateway.http.server.certificates import reload_certificates

log = logging.getLogger(__name__)

# Settings fixed for the life of the process.
FIXED = (
    "listen",
    "limits",
    "redis",
    "admin",
    "loop",
    "log_format",
    "blob",
    "tracing",
    "upstream_tls",
    "state_dir",
)


def apply(app: web.Application, path: str | Path) -> bool:
    """Load `path` and make it the gateway's settings; False (and a log line) when refused.
    The listeners' certificate files are not loaded here: `reload` loads them on its own."""
    live = app[LIVE]
    old = live.settings
    try:
        new, fixed, asked = next_settings(old, path)
    except ConfigError as exc:
        return _refused(str(exc))
    if fixed:
        log.warning(
            "config reload: %s change(s) need a restart; kept as they are", ", ".join(fixed)
        )
    was, wanted = old.redis.key_prefix, asked.redis.key_prefix
    if wanted != was:
        log.warning(
            "config reload: redis.key_prefix %r -> %r is kept until a restart; from then on "
            "keys recorded under %r are no longer replayed: a retry of every one of them runs "
            "upstream again (docs/configuration.md, redis.key_prefix)",
            was,
            wanted,
            was,
        )
    orphaned = _orphaned(old, new)
    if orphaned:
        log.warning(
            "config reload: keys recorded under route %s are no longer replayed: a retry of "
            "one runs upstream again",
            ", ".join(orphaned),
        )
    app[SERVICES].upstreams.add(new.upstreams())
    live.settings = new
    logging.getLogger().setLevel(new.log_level.upper())
    log.info("config reloaded from %s (%d routes)", path, len(new.routes))
    return True


def next_settings(old: Settings, path: str | Path) -> tuple[Settings, list[str], Settings]:
    """What a reload of `path` over `old` serves with, the fields it keeps from `old` (bound
    at start), and the settings as the file asks for them; ConfigError when it is refused.
    The `--workers` supervisor judges a reload with it as its workers do
    (`ops.supervisor.serving`)."""
    asked = new = load_settings(path, tls_files=False)
    unprotected = protects_nothing(new)  # a file emptied by mistake would unprotect every route
    if unprotected is not None:
        raise ConfigError(f"{path}: {unprotected}")
    fixed = [name for name in FIXED if getattr(new, name) != getattr(old, name)]
    if fixed:
        new = new.model_copy(update={name: getattr(old, name) for name in fixed})
        try:  # the new routes against the listeners kept: one may be a route's upstream
            new.check_coherence()
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return new, fixed, asked


def _orphaned(old: Settings, new: Settings) -> list[str]:
    """The routes whose records the new config can no longer find: a record's Redis key
    holds its route's name and the hash of its scope values (core.keys)."""
    kept = {route.name: route for route in new.routes}
    found = []
    for route in old.routes:
        now = kept.get(route.name)
        if now is None:
            found.append(f"{route.name!r} (gone, or renamed)")
        elif [h.lower() for h in now.scope] != [h.lower() for h in route.scope]:
            found.append(f"{route.name!r} (its scope changed)")
    return found


def _refused(why: str) -> bool:
    """One log line (several bad fields joined), as the start says it in one line."""
    reason = "; ".join(line.strip() for line in why.splitlines() if line.strip())
    log.error("config reload refused, the running config stays: %s", reason)
    return False


def reload(app: web.Application, path: str | Path) -> None:
    """SIGHUP: the TLS listeners' certificate files (those the running config names), then
    the config; each is kept as it was when its files do not load."""
    reload_certificates(app)
    apply(app, path)


def reload_on_sighup(app: web.Application, path: str | Path) -> None:
    """While `app` runs, SIGHUP reloads `path`. Call before the app starts."""

    async def handler(app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, reload, app, path)
        try:
            yield
        finally:  # the default action would end the process in its last cleanups
            loop.remove_signal_handler(signal.SIGHUP)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)

    app.cleanup_ctx.append(handler)
