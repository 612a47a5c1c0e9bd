"""The `idem-gateway` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from aiohttp import web

from gateway.config.loading import load_settings
from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.http.app import DRAIN_SECONDS, create_app
from gateway.ops import keyscli
from gateway.ops.admin import attach_admin
from gateway.ops.collector import tune_collector
from gateway.ops.reload import reload_on_sighup
from gateway.ops.workers import Supervisor, count_requests, default_workers, worker_command
from gateway.store.embedded import RedisServer
from gateway.telemetry import logs

log = logging.getLogger("gateway")


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.warning("uvloop is not installed; using the asyncio loop")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def serve(
    settings: Settings,
    config_path: str | None = None,
    redis_url: str | None = None,
    worker: bool = False,
) -> None:
    """Run the gateway until SIGINT/SIGTERM; start a local Redis for `url: embedded`.

    SIGHUP reloads `config_path`. A worker (`--workers N`) shares its port with its
    siblings and uses the Redis its parent resolved.
    """
    embedded: RedisServer | None = None
    url = redis_url or settings.redis.url
    if redis_url is None and settings.redis.topology == "embedded":
        embedded = RedisServer(unix_socket=True, embedded=True)
        embedded.start()
        url = embedded.url
        log.info(
            "embedded redis-server started (%s, from the %s)", embedded.binary, embedded.source
        )
    try:
        listen = settings.listen
        log.info(
            "idem-gateway listening on http://%s:%d (%d routes, %s loop)",
            listen.host, listen.port, len(settings.routes), settings.loop,
        )  # fmt: skip
        app = create_app(settings, url)
        if settings.admin is not None:
            attach_admin(app, settings.admin, worker=worker)
        if config_path:
            reload_on_sighup(app, config_path)
        if worker:
            count_requests(app)
        app.on_startup.append(tune_collector)  # last: after the resources are up
        web.run_app(
            app,
            host=listen.host,
            port=listen.port,
            backlog=listen.backlog,
            reuse_port=worker,
            access_log=None,
            print=None,
            shutdown_timeout=DRAIN_SECONDS,
            loop=new_loop(settings.loop),
        )
    finally:
        if embedded is not None:
            embedded.close()


def supervise(settings: Settings, config: str | None, workers: int) -> int:
    """Run `workers` gateway processes on one port, sharing one embedded Redis if needed."""
    embedded: RedisServer | None = None
    url: str | None = None  # the workers' Redis when the parent starts it
    if settings.redis.topology == "embedded":
        embedded = RedisServer(unix_socket=True, embedded=True)
        embedded.start()
        url = embedded.url
        log.info("embedded redis-server started for %d workers at %s", workers, url)
    listen = settings.listen
    log.info("idem-gateway: %d workers on http://%s:%d", workers, listen.host, listen.port)
    try:
        return Supervisor(worker_command(config, url), workers).run()
    finally:
        if embedded is not None:
            embedded.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="idem-gateway",
        description="An idempotency gateway: makes POST/PUT/PATCH of an upstream safe to retry.",
    )
    parser.add_argument("-c", "--config", metavar="FILE", help="YAML config (default: built-in)")
    parser.add_argument("--check", metavar="FILE", help="validate a config file and exit")
    parser.add_argument(
        "--workers", type=int, metavar="N", default=default_workers(),
        help="gateway processes sharing the port (default: one per core, here %(default)s)",
    )  # fmt: skip
    # Set by the --workers parent for its children.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    keyscli.add_parser(parser.add_subparsers(dest="command", metavar="keys"))
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    path = args.check or args.config
    try:
        settings = load_settings(path) if path else Settings()
    except ConfigError as exc:
        print(f"idem-gateway: invalid config {path}:\n{exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{path}: OK ({len(settings.routes)} routes)")
        return 0
    if args.command == "keys":
        return keyscli.run(args, settings)
    logs.configure(settings.log_level, settings.log_format)
    if args.workers > 1 and not args.worker:
        if settings.listen.port == 0:
            parser.error("--workers needs a fixed listen.port (not 0)")
        return supervise(settings, args.config, args.workers)
    try:
        serve(settings, path, args.redis_url, worker=args.worker)
    except ConfigError as exc:  # found at start-up, e.g. a blob bucket that does not exist
        print(f"idem-gateway: cannot start:\n{exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
