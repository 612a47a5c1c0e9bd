"""The `idem-gateway` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import importlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn

from gateway import build, closing
from gateway.config.loading import load_settings, protects_nothing
from gateway.config.schema import schema_text
from gateway.config.server_tls import ServerTls
from gateway.config.settings import Settings
from gateway.errors import ConfigError
from gateway.http.app import DRAIN_SECONDS, METRICS, create_app
from gateway.http.server import site
from gateway.http.server.certificates import attach_tls
from gateway.ops import keyscli, sizing, upgradecli
from gateway.ops.admin import attach_admin
from gateway.ops.collector import tune_collector
from gateway.ops.listener import ListenError, bind, inherited
from gateway.ops.reload import reload_on_sighup
from gateway.ops.supervisor.admin_hub import MAX_WORKERS
from gateway.ops.supervisor.parent import supervise
from gateway.ops.supervisor.serving import worker_settings
from gateway.ops.supervisor.workers import count_requests, default_workers
from gateway.store.embedded import EmbeddedRedis
from gateway.telemetry import logs
from gateway.telemetry.logs import START_LINES

log = logging.getLogger("gateway")

# Exit codes of a gateway that cannot start (docs/operations.md).
EXIT_CONFIG: Final = 2  # an invalid config, or a start-up check it fails (blob store, Redis policy)
EXIT_LISTEN: Final = 3  # the listen address is in use or not allowed
EXIT_INTERRUPTED: Final = 130  # Ctrl-C (SIGINT) while starting, as a shell reports it


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
    listen_fd: int | None = None,
    ready_fd: int | None = None,
    admin_channel: str | None = None,
    first_tls: ServerTls | None = None,
    *,
    worker: bool = False,
    admin_fd: int | None = None,
) -> None:
    """Run the gateway until SIGINT/SIGTERM; start a local Redis for `url: embedded`. What
    it opens is closed in reverse whichever step fails (`gateway.closing`).

    SIGHUP reloads `config_path`. It serves the socket `listen_fd` (and its admin listener
    the socket `admin_fd`) where whatever started it bound them, else it binds their
    addresses itself. A `worker` (`--workers N`) serves the socket its parent bound, uses
    the Redis its parent resolved, starts with the copies of the listener's files its
    parent keeps (`first_tls`) and serves its admin application to its parent only, on the
    unix socket `admin_channel`.
    """
    listen = settings.listen
    with contextlib.ExitStack() as opened:
        if listen_fd is not None:
            sock = inherited(listen_fd, "--listen-fd")
        else:
            sock = bind(listen.host, listen.port, listen.reuse_port)
        opened.callback(closing.close, "the listening socket", sock.close)
        admin = inherited(admin_fd, "--admin-fd") if admin_fd is not None else None
        if admin is not None:  # taken with the other one: closed whichever step fails next
            opened.callback(closing.close, "the admin socket", admin.close)
        url = redis_url or settings.redis.url
        if redis_url is None and settings.redis.topology == "embedded":
            embedded = EmbeddedRedis(Path(settings.state_dir))
            opened.callback(closing.close, "the embedded redis-server", embedded.close)
            embedded.start()
            url = embedded.url
            log.info(
                "embedded redis-server started (%s, from the %s)", embedded.binary, embedded.source
            )
        _run(settings, sock, url, config_path, worker, ready_fd, admin_channel, admin, first_tls)


def _run(
    settings: Settings,
    sock: socket.socket,
    redis_url: str,
    config_path: str | None,
    worker: bool,
    ready_fd: int | None,
    admin_channel: str | None,
    admin_sock: socket.socket | None,
    first_tls: ServerTls | None,
) -> None:
    """Serve the application on the bound `sock` until told to stop."""
    listen = settings.listen
    host, port = sock.getsockname()[:2]
    routes = len(settings.routes)

    def listening(_: str) -> None:  # run_app calls it once the server accepts
        START_LINES.release()
        if ready_fd is not None:  # the --workers parent waits for it to start the rest
            os.write(ready_fd, b"1")
            os.close(ready_fd)
        log.info(
            "idem-gateway listening on %s://%s:%d (%d route%s, %s loop, %s)",
            scheme,
            host,
            port,
            routes,
            "" if routes == 1 else "s",
            settings.loop,
            build.describe(),
        )

    app = create_app(settings, redis_url)
    tls = None
    if listen.tls is not None:
        tls = attach_tls(app, "listen", listen.tls, app[METRICS], first_tls).context
    scheme = "http" if tls is None else "https"
    if settings.admin is not None:
        public = (host, port)
        attach_admin(app, settings.admin, admin_channel, public_address=public, sock=admin_sock)
    if config_path:
        reload_on_sighup(app, config_path)
    if worker:
        count_requests(app)
    app.on_startup.append(tune_collector)  # last: after the resources are up
    try:
        loop = new_loop(settings.loop)
        build.contain_compiled_tasks(loop)
        site.run(app, sock, listen.backlog, DRAIN_SECONDS, listening, loop, tls)
    except OSError as exc:
        # Two gateways started in the same instant can both bind (SO_REUSEADDR); the one
        # that listens second is refused here, before it has said "listening".
        if exc.errno != errno.EADDRINUSE:
            raise
        raise ListenError(f"cannot listen on {host}:{port}: the address is in use") from None


class _Parser(argparse.ArgumentParser):
    """Usage mistakes in one line (argparse prints its usage first), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before the gateway serves (then it drains instead)
        return interrupted()


def interrupted() -> int:
    print("idem-gateway: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _parser() -> _Parser:
    """The command line: the gateway's options, its subcommands, and the hidden options its
    `--workers` parent sets for each worker."""
    parser = _Parser(
        prog="idem-gateway",
        usage=(
            "idem-gateway [-h] [-c FILE] [--check FILE] [--workers N] "
            "[keys|schema|sizing|upgraded ...]"
        ),
        description="An idempotency gateway: makes POST/PUT/PATCH of an upstream safe to retry.",
    )
    parser.add_argument(
        "-c", "--config", metavar="FILE", help="YAML config (e.g. config/gateway.example.yaml)"
    )
    parser.add_argument("--check", metavar="FILE", help="validate a config file and exit")
    parser.add_argument("--version", action="version", version=f"idem-gateway {build.describe()}")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        default=default_workers(),
        help="gateway processes sharing the port (default: one per core, here %(default)s)",
    )
    # Set by the --workers parent for its children; the sockets (--listen-fd, --admin-fd)
    # also by whatever bound them for the gateway (the tests' harness holds its ports).
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    parser.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--admin-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--admin-socket", help=argparse.SUPPRESS)
    parser.add_argument("--serving", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(
        dest="command", metavar="keys|schema|sizing|upgraded", prog="idem-gateway"
    )
    keyscli.add_parser(commands)
    commands.add_parser("schema", help="print the config's JSON Schema (config/schema.json)")
    sizing.add_parser(commands)
    upgradecli.add_parser(commands)
    return parser


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for option, given in (("--check", args.check), ("--config", getattr(args, "config", None))):
        if given == "":  # `--check "$CONFIG"` with CONFIG unset: not the built-in config
            parser.error(f"{option} needs a file name, got an empty one")
    if not 1 <= args.workers <= MAX_WORKERS:
        parser.error(f"--workers must be from 1 to {MAX_WORKERS}")
    if args.command == "schema":
        return say(schema_text())
    if args.command == "sizing":
        return say(sizing.output(args))

    path = args.check or args.config
    first_tls: ServerTls | None = None
    try:
        if args.serving:  # a worker: what its siblings serve with, kept by the supervisor
            settings, first_tls = worker_settings(args.serving)
        else:
            settings = load_settings(path) if path else Settings()
    except ConfigError as exc:
        message = one_line(str(exc))
        if not path:  # no file: the environment's fault (IDEM_STATE_DIR)
            print(f"idem-gateway: cannot start: {message}", file=sys.stderr)
            return EXIT_CONFIG
        if not message.startswith(str(path)):  # a read or YAML error names the file itself
            message = f"{path}: {message}"
        print(f"idem-gateway: invalid config {message}", file=sys.stderr)
        return EXIT_CONFIG
    if not args.serving:  # a worker's supervisor said it already
        for old_name in settings.redis.deprecations():
            print(f"idem-gateway: {path}: {old_name}", file=sys.stderr)
    tool = args.command in ("keys", "upgraded")  # works on Redis, serves nothing
    unprotected = protects_nothing(settings) if not tool else None
    if unprotected is not None:
        where = path or "the built-in config (give one with --config)"
        print(f"idem-gateway: invalid config {where}: {unprotected}", file=sys.stderr)
        return EXIT_CONFIG
    missing = tracing_unavailable(settings) if not tool else None
    if missing is not None:  # --check says it too: the start would refuse it
        print(f"idem-gateway: cannot start: {missing}", file=sys.stderr)
        return EXIT_CONFIG
    if args.check:
        routes = len(settings.routes)
        return say(f"{path}: OK ({routes} route{'' if routes == 1 else 's'})\n")
    if args.command == "keys":
        return keyscli.run(args, settings)
    if args.command == "upgraded":
        return upgradecli.run(args, settings)
    logs.configure(settings.log_level, settings.log_format)
    START_LINES.hold()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # until the reload handler is in place
    try:
        if args.workers > 1 and not args.worker:
            return supervise(settings, args.config, args.workers, args.listen_fd, args.admin_fd)
        serve(
            settings,
            path,
            args.redis_url,
            args.listen_fd,
            args.ready_fd,
            args.admin_socket,
            first_tls,
            worker=args.worker,
            admin_fd=args.admin_fd,
        )
    except ListenError as refused:
        print(f"idem-gateway: {refused}", file=sys.stderr)
        return EXIT_LISTEN
    except ConfigError as wrong:  # found at start-up, e.g. a blob bucket that does not exist
        print(f"idem-gateway: cannot start: {one_line(str(wrong))}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def say(text: str) -> int:
    """Write `text` to standard output: 0, or 1 and one line when it cannot be written (a
    full disk under `schema > config/schema.json`, a closed pipe)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as exc:
        # What is still buffered would fail again, with a traceback, as Python exits.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"idem-gateway: cannot write the output: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


def tracing_unavailable(settings: Settings) -> str | None:
    """Why `tracing.enabled` cannot be honoured here (the otel extra is missing), or None."""
    if not settings.tracing.enabled:
        return None
    try:  # the SDK the extra installs, with its exporter (gateway.telemetry.tracing's)
        importlib.import_module("opentelemetry.sdk.trace")
    except ImportError as exc:
        return (
            f"tracing.enabled needs the otel extra ({exc.name or exc} is not installed): "
            "pip install 'idem-gateway[otel]'"
        )
    return None


def one_line(message: str) -> str:
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


if __name__ == "__main__":
    sys.exit(main())
