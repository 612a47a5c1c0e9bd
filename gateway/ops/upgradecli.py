"""`idem-gateway upgraded`: the operator's word that every gateway sharing a Redis runs this
release, so that `redis.record_format: 2` may be written (`store.fleet` says why it waits)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, Final

from gateway import build
from gateway.config.settings import Settings
from gateway.config.units import parse_duration
from gateway.store.client import close_client, make_client
from gateway.store.failures import FAILURES
from gateway.store.fleet import CHECK_EVERY, declare_upgraded

STILL_SEEN: Final = 1  # a gateway of an earlier release loaded its scripts again
UNREACHABLE: Final = 3  # Redis did not answer
DEFAULT_WATCH: Final = "30s"  # past a readiness probe's period: an idle gateway reloads too


def add_parser(commands: Any) -> None:
    upgraded = commands.add_parser(
        "upgraded",
        help="say every gateway runs this release: lets redis.record_format 2 be written",
    )
    upgraded.add_argument(
        "-c", "--config", metavar="FILE", default=argparse.SUPPRESS, help="YAML config"
    )
    upgraded.add_argument(
        "--watch",
        default=DEFAULT_WATCH,
        metavar="DURATION",
        help="how long to watch for a gateway of an earlier release after emptying Redis's "
        "script cache (default: %(default)s)",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    redis = settings.redis
    if redis.topology == "embedded":
        print("idem-gateway upgraded: the embedded Redis is one gateway's own: nothing to do")
        return 0
    try:
        watch = parse_duration(args.watch)
    except ValueError as wrong:
        print(f"idem-gateway upgraded: --watch: {wrong}", file=sys.stderr)
        return 2
    where = redis.url if redis.topology == "single" else redis.topology
    try:
        found = asyncio.run(build.contained(_run(settings, watch)))
    except FAILURES as down:
        print(f"idem-gateway upgraded: Redis unavailable: {down}", file=sys.stderr)
        return UNREACHABLE
    if found:
        print(
            f"idem-gateway upgraded: a gateway of release {', '.join(found)} still uses "
            f"{where}: it loaded its scripts again after they were cleared; stop it (or "
            "upgrade it) and run this again",
            file=sys.stderr,
        )
        return STILL_SEEN
    print(
        f"idem-gateway upgraded: no gateway of an earlier release used {where} for "
        f"{args.watch}: gateways with redis.record_format 2 write it within "
        f"{CHECK_EVERY:g} s"
    )
    return 0


async def _run(settings: Settings, watch: float) -> list[str]:
    client = make_client(settings.redis, settings.redis.url)
    try:
        return await declare_upgraded(client, settings.redis.key_prefix, watch)
    finally:
        await close_client(client)
