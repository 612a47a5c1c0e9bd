"""The gateway with named parts of its work taken out, for `loadtest.ablate` only.

`python -m loadtest.ablated_gateway --without redis,gc -- --config gw.yaml --workers 1` runs
`python -m gateway` after replacing each named part with the least that keeps requests
flowing. What a part costs is then the difference in CPU per request. Never a way to run
the gateway: without `redis` nothing is claimed and every request is forwarded.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

# Its stand-ins replace module attributes, which compiled callers never look up: the gateway
# loads as pure Python here, compiled build or not (gateway/build.py).
os.environ["IDEM_PURE"] = "1"

from gateway.core.claims import Claim, ClaimResult
from gateway.http.flow import handler, tasks
from gateway.http.server import access
from gateway.ops import collector
from gateway.store import store
from gateway.upstream import upstreams


def _replace(owner: object, name: str, value: object) -> None:
    setattr(owner, name, value)  # a stand-in of another signature, on purpose


def _no_redis() -> None:
    async def claim(self: store.Store, *args: Any, **kwargs: Any) -> ClaimResult:
        return ClaimResult(Claim.CLAIMED)

    async def complete(self: store.Store, *args: Any) -> bool:
        return True

    _replace(store.Store, "claim", claim)
    _replace(store.Store, "complete", complete)


def _default_gc() -> None:
    async def untouched(app: Any) -> None:
        return None

    _replace(collector, "tune_collector", untouched)
    _replace(sys.modules["gateway.cli"], "tune_collector", untouched)


def _no_observe() -> None:
    _replace(access, "observed", lambda handle, metrics: handle)
    _replace(sys.modules["gateway.http.app"], "observed", access.observed)


def _no_digests() -> None:
    _replace(handler, "fingerprint", lambda *args: "0" * 64)
    _replace(handler, "tenant_id", lambda values: "0" * 32)


def _no_forward_task() -> None:
    """The forward runs in the handler's own task, unshielded."""

    class Direct:
        def __getattr__(self, name: str) -> Any:
            return getattr(asyncio, name)

        @staticmethod
        def shield(awaitable: Any) -> Any:
            return awaitable

    _replace(handler, "asyncio", Direct())
    _replace(tasks.TaskSet, "spawn", lambda self, coro: coro)


def _no_lean_client() -> None:
    """The claimed call goes over aiohttp's ClientSession, as pass-through requests do."""
    _replace(upstreams, "httptools_serves", lambda origin: False)


PARTS: dict[str, Callable[[], None]] = {
    "redis": _no_redis,  # the claim and the completion answered in-process
    "gc": _default_gc,  # Python's default collector settings (no tuning at start-up)
    "observe": _no_observe,  # no request id, overhead metric or access log
    "digests": _no_digests,  # no fingerprint, tenant or key digests
    "task": _no_forward_task,  # no shielded task per forwarded request
    "lean": _no_lean_client,  # aiohttp's client for the claimed call instead of the lean one
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--without", default="", help=f"comma-separated, of {sorted(PARTS)}")
    parser.add_argument("gateway_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    # The CLI module must be loaded before its names are replaced.
    import gateway.cli
    import gateway.http.app  # noqa: F401

    for part in filter(None, args.without.split(",")):
        PARTS[part]()
    sys.argv = ["gateway", *[a for a in args.gateway_args if a != "--"]]
    runpy.run_module("gateway", run_name="__main__")


if __name__ == "__main__":
    main()
