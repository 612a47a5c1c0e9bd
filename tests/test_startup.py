"""Starting safely: one gateway per port, busy ports refused with one line, workers that reap
only their own children."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from gateway.ops.supervisor.workers import Supervisor
from testkit.ports import Port
from testkit.procs import GatewayProcess

from .upstream import CountingUpstream


@pytest.fixture
def started() -> Iterator[list[GatewayProcess]]:
    gateways: list[GatewayProcess] = []
    yield gateways
    for gateway in gateways:
        gateway.stop()


def run_second(config: dict[str, object], folder: Path) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "2"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


async def test_a_second_gateway_on_a_served_port_exits_with_one_line(
    upstream: tuple[CountingUpstream, str], tmp_path: Path, started: list[GatewayProcess]
) -> None:
    """Both with the embedded Redis, the default: were the second to join the port, the same
    key would run once per gateway."""
    counting, origin = upstream
    config = {"routes": [{"name": "api", "path_prefix": "/", "upstream": origin}]}
    (tmp_path / "first").mkdir()
    first = GatewayProcess(dict(config), tmp_path / "first", ["--workers", "2"])
    await asyncio.to_thread(first.start)
    started.append(first)
    second = await asyncio.to_thread(
        run_second, {**config, "listen": {"host": "127.0.0.1", "port": first.port}}, tmp_path / "b"
    )
    assert second.returncode == 3
    lines = second.stderr.strip().splitlines()
    assert (
        lines[-1] == f"idem-gateway: cannot listen on 127.0.0.1:{first.port}: the address is in use"
    )
    assert "Traceback" not in second.stderr and "listening on" not in second.stderr
    async with aiohttp.ClientSession() as http:
        for _ in range(20):
            async with http.post(f"{first.url}/pay", headers={"Idempotency-Key": "one"}) as resp:
                assert resp.status == 201
    assert counting.count("/pay", "one") == 1


def test_sharing_a_port_is_refused_with_the_embedded_redis(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"listen": {"reuse_port": True}}))
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "--check", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "listen.reuse_port shares the port" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_supervisor_reaps_only_its_own_workers() -> None:
    """A child of the supervising process that is not a worker (as the embedded redis-server
    is) keeps its exit status for its owner."""
    bystander = subprocess.Popen([sys.executable, "-c", "raise SystemExit(7)"])
    os.waitid(os.P_PID, bystander.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
    handlers = {
        sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    try:
        supervisor = Supervisor([sys.executable, "-c", "pass"], 1)
        supervisor.stopping = True  # a worker that exits is not replaced
        assert supervisor.run() == 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert bystander.wait(timeout=5) == 7


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("routes: [\n", "{path}:2:1: not valid YAML: "),
        ("upstream: http://127.0.0.1:9\n", "{path}: no routes: the gateway would protect nothing"),
    ],
)
def test_a_config_error_is_one_line_naming_the_file(tmp_path: Path, text: str, line: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    for args in (["--check", str(path)], ["--config", str(path)]):
        out = subprocess.run(
            [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 2
        [only] = out.stderr.strip().splitlines()
        assert only.startswith("idem-gateway: invalid config " + line.format(path=path)), only


def test_pass_through_runs_a_config_without_routes_on_purpose(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("upstream: http://127.0.0.1:9\npass_through: true\n")
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "--check", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (out.returncode, out.stdout.strip()) == (0, f"{path}: OK (0 routes)")


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("refused", "ConnectionError"),
        ("db index", "DB index is out of range"),
        ("password", "AuthenticationError"),
    ],
)
async def test_a_redis_not_usable_at_start_is_one_loud_line_naming_why_and_fails_closed(
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    tmp_path: Path,
    started: list[GatewayProcess],
    case: str,
    why: str,
    refused_port: Port,
) -> None:
    counting, origin = upstream
    redis: dict[str, object] = {"connect_timeout": "200ms"}
    if case == "refused":
        redis["url"] = f"redis://127.0.0.1:{refused_port.number}/0"
    elif case == "db index":
        redis["url"] = redis_url.rsplit("/", 1)[0] + "/99"  # the server has 16
    else:
        redis.update(url=redis_url, username="nobody", password="wrong")
    config = {
        "redis": redis,
        "admin": {},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    gateway = GatewayProcess(config, tmp_path)
    admin = gateway.admin_port
    await asyncio.to_thread(gateway.start)
    started.append(gateway)
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gateway.url}/pay", headers={"Idempotency-Key": "k"}) as resp:
            assert resp.status == 503
        async with http.get(f"http://127.0.0.1:{admin}/readyz") as resp:
            assert resp.status == 503
    loud = [line for line in gateway.log().splitlines() if "redis is not usable at start" in line]
    assert len(loud) == 1 and '"level":"error"' in loud[0]
    assert why in loud[0]
    assert "wrong" not in loud[0]  # the password is never logged
    assert counting.count("/pay") == 0
