"""`idem-gateway keys show|purge|resolve|settle`: operators' work on one record, straight in
Redis."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, Final

import orjson

from gateway import build
from gateway.config.settings import Settings
from gateway.errors import StoreUnavailable
from gateway.ops import keyops
from gateway.store.breaker import CircuitBreaker
from gateway.store.client import make_client
from gateway.store.embedded import running_url
from gateway.store.sending import sender_for
from gateway.store.store import Store

# Exit codes beyond 0 (done) and 2 (bad usage or config).
NOT_FOUND: Final = 1  # no record / not an unknown outcome / not corrupt / not confirmed
UNREACHABLE: Final = 3  # Redis did not answer


def add_parser(commands: Any) -> None:
    """The `keys` command and its four operations."""
    keys = commands.add_parser("keys", help="show, purge, resolve or settle one idempotency record")
    keys.add_argument(
        "-c", "--config", metavar="FILE", default=argparse.SUPPRESS, help="YAML config"
    )
    ops = keys.add_subparsers(dest="op", required=True, metavar="show|purge|resolve|settle")
    for name, text in (
        ("show", "state, age, time to live, status and sizes of a record"),
        ("purge", "delete a record: the next request with the key runs upstream"),
        ("resolve", "settle an unknown outcome: purge it, or store the real result"),
        ("settle", "settle a corrupt record as an unknown outcome: it never runs again"),
    ):
        op = ops.add_parser(name, help=text)
        op.add_argument("--route", required=True, help="route name")
        op.add_argument(
            "--tenant",
            action="append",
            default=[],
            metavar="VALUE",
            help="the value of the route's scope header as clients send it "
            "(repeat for several scope headers, in their order)",
        )
        op.add_argument("key", help="the Idempotency-Key value")
        if name == "purge":
            op.add_argument(
                "--yes",
                action="store_true",
                help="purge a record whose request ran (a retry after it runs it again)",
            )
        if name == "resolve":
            how = op.add_mutually_exclusive_group(required=True)
            how.add_argument("--purge", action="store_true", help="delete it: a retry runs")
            how.add_argument("--status", type=int, help="the status retries get from now on")
            op.add_argument("--body-file", type=Path, help="the body retries get (with --status)")
            op.add_argument("--content-type", help="the Content-Type of that body")


def run(args: argparse.Namespace, settings: Settings) -> int:
    url = settings.redis.url
    if settings.redis.topology == "embedded":
        found = running_url(Path(settings.state_dir))
        if found is None:
            print(
                f"idem-gateway keys: no gateway with the embedded Redis runs on state_dir "
                f"{settings.state_dir}; start it, or configure redis.url",
                file=sys.stderr,
            )
            return 2
        url = found
    body = b""
    if args.op == "resolve" and args.body_file is not None:
        try:
            body = args.body_file.read_bytes()
        except OSError as exc:
            print(f"idem-gateway keys: {args.body_file}: {exc.strerror}", file=sys.stderr)
            return 2
    try:
        return asyncio.run(build.contained(_run(args, settings, url, body)))
    except keyops.KeyOpError as failed:
        print(f"idem-gateway keys: {failed}", file=sys.stderr)
        return NOT_FOUND if failed.status in (404, 409) else 2
    except StoreUnavailable as down:
        print(f"idem-gateway keys: Redis unavailable: {down}", file=sys.stderr)
        return UNREACHABLE


async def _run(args: argparse.Namespace, settings: Settings, url: str, body: bytes) -> int:
    route, names = keyops.locate(settings, args.route, args.tenant, args.key)
    client = make_client(settings.redis, url)
    sender = sender_for(client, CircuitBreaker(1, 1.0), pipeline=False)
    store = Store(client, sender, prefix=settings.redis.key_prefix)
    try:
        if args.op == "show":
            found = await keyops.show(store, names)
            print(orjson.dumps(found, option=orjson.OPT_INDENT_2).decode())
            return NOT_FOUND if found["state"] == "absent" else 0
        if args.op == "purge":
            await keyops.purge(store, names, args.yes, "--yes")
            print("purged: the next request with this key runs upstream")
            return 0
        if args.op == "settle":
            await keyops.settle(store, settings.redis.key_prefix, route, names)
            print(f"settled as an unknown outcome: {keyops.SETTLED}")
            return 0
        if args.purge:
            await keyops.resolve_by_purge(store, names)
            print("resolved: purged, the next retry runs upstream")
        else:
            await keyops.resolve_with(store, route, names, args.status, body, args.content_type)
            print(f"resolved: retries now get {args.status} ({len(body)} body bytes)")
        return 0
    finally:
        await store.close()
