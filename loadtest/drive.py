"""What the load scripts share: the scenarios, driving a target with wrk, the counting
upstream's counters read once they settle, a gateway's config, and CPU per request.

`loadtest.run`, `loadtest.compare`, `loadtest.instructions` and the probes import it; it runs
nothing by itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .procs import Child

WRK_SCRIPT = Path(__file__).parent / "wrk" / "idem.lua"


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str  # the wrk script's MODE
    connections: int
    sleep_ms: int = 0  # the upstream's pause per call
    idempotent: bool = True
    per_key: int = 10
    keys: int = 1000  # for "fixed": the completed keys that are replayed
    extra_loops: bool = False  # also run it under the stock asyncio loop


SCENARIOS = (
    Scenario("new-key", "unique", 50),
    Scenario("replay", "fixed", 50),
    Scenario("get-pass", "get", 50, idempotent=False),
    Scenario("seed", "seed", 200, sleep_ms=50, extra_loops=True),
    Scenario("burst", "burst", 200, sleep_ms=50, per_key=100),
)


def find_duplicates(counts: Mapping[str, int]) -> dict[str, int]:
    """The keys the upstream ran other than exactly once, from its own counters."""
    return {key: n for key, n in counts.items() if n != 1}


def ensure_wrk() -> str:
    """wrk from PATH, installed from the distribution's packages when we may."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("wrk not found: installing it with apt-get", file=sys.stderr)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        if subprocess.run(["apt-get", "install", "-y", "wrk"], **quiet).returncode != 0:
            subprocess.run(["apt-get", "update"], **quiet)
            subprocess.run(["apt-get", "install", "-y", "wrk"], **quiet)
        found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is required: install it (Debian/Ubuntu: apt-get install wrk)")
    return found


def get_json(url: str, data: bytes | None = None) -> Any:
    with urllib.request.urlopen(url, data=data, timeout=10) as answer:
        return json.loads(answer.read()) if data is None else None


def settle(upstream: str, quiet_for: float = 0.3, timeout: float = 15.0) -> dict[str, Any]:
    """The upstream's counters once no call has arrived for `quiet_for` seconds.

    Requests wrk abandoned at the end may still be on their way through the proxy.
    """
    deadline = time.monotonic() + timeout
    last = get_json(f"{upstream}/__counts")
    while time.monotonic() < deadline:
        time.sleep(quiet_for)
        now = get_json(f"{upstream}/__counts")
        if now["total"] == last["total"]:
            return now
        last = now
    return last


def prefill(target: str, run: str, keys: int) -> None:
    """Complete `keys` keys through the gateway once, for the replay scenario."""
    import asyncio

    import aiohttp

    async def go() -> None:
        # An https target's certificate is the run's own throwaway one: not verified.
        connector = aiohttp.TCPConnector(ssl=False)
        async with aiohttp.ClientSession(connector=connector) as session:
            semaphore = asyncio.Semaphore(32)

            async def one(i: int) -> None:
                async with semaphore:
                    headers = {"Idempotency-Key": f"{run}-k{i}", "Content-Type": "application/json"}
                    async with session.post(
                        f"{target}/pay", data=b'{"amount":100,"currency":"EUR"}', headers=headers
                    ) as answer:
                        await answer.read()
                        if answer.status != 201:
                            raise RuntimeError(f"prefill got {answer.status}")

            await asyncio.gather(*(one(i) for i in range(keys)))

    asyncio.run(go())


def run_wrk(
    wrk: str, url: str, scenario: Scenario, run: str, seconds: float, connections: int
) -> dict[str, Any]:
    env = {
        **os.environ,
        "MODE": scenario.mode,
        "RUN": run,
        "KEYS": str(scenario.keys),
        "PER_KEY": str(scenario.per_key),
    }
    cmd = [
        wrk, "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
        "-s", str(WRK_SCRIPT), url,
    ]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 60)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line.removeprefix("RESULT "))
    raise RuntimeError(f"wrk gave no result: {out.stdout}\n{out.stderr}")


def gateway_config(
    port: int,
    upstream: str,
    redis_url: str,
    loop: str,
    pipeline: bool,
    admin_port: int,
    tls: tuple[str, str] | None = None,
) -> dict:
    listen: dict[str, Any] = {"host": "127.0.0.1", "port": port}
    if tls is not None:
        listen["tls"] = {"cert": tls[0], "key": tls[1]}
    return {
        "listen": listen,
        "admin": {"host": "127.0.0.1", "port": admin_port},  # its /metrics count outcomes
        "loop": loop,
        "log_level": "warning",
        "upstream": upstream,
        "redis": {"url": redis_url, "pipeline": pipeline},
        "routes": [{"name": "pay", "path_prefix": "/pay", "upstream": upstream}],
    }


def cpu_per_request(
    wrk: str, target: Child, upstream: Child, scenario: Scenario, tag: str, seconds: float
) -> float:
    """Drive `target` with `scenario` for `seconds`: its CPU microseconds per request.

    Fails when the gateway answered 5xx: a cheap 503 is no measurement of the work (a 409
    is one: a replayed key's first requests may meet it in flight)."""
    get_json(f"{upstream.url}/__reset?sleep_ms=0", data=b"")
    before = target.cpu()
    result = run_wrk(wrk, target.url, scenario, tag, seconds, scenario.connections)
    used = target.cpu() - before
    settle(upstream.url)
    failed = {code: n for code, n in result["codes"].items() if str(code).startswith("5")}
    if failed:
        raise RuntimeError(f"{target.name} answered {failed} in {scenario.name}")
    return used * 1e6 / max(1, result["requests"])
