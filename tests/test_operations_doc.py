"""docs/operations.md's key commands run as written, against the config file they name: an
UNKNOWN outcome left by that config's `orders` route is shown, then settled with the result
the block stores, and the next retry replays it."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.config.loading import load_settings
from gateway.config.policy import Timeouts
from gateway.http.app import create_app

from .upstream import serving_app

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = (ROOT / "docs" / "operations.md").read_text()


def keys_block() -> list[str]:
    """The commands of the `sh` block of "Fixing a key", continuation lines joined."""
    section = OPERATIONS.split("## Fixing a key", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None
    text = block.group(1).replace("\\\n", " ")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


@pytest.fixture
async def stalling_upstream() -> AsyncIterator[str]:
    """An upstream that never answers: the gateway's timeout leaves an unknown outcome."""

    async def stall(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stall)
    async with serving_app(app) as origin:
        yield origin


async def test_fixing_a_key_commands_run_as_written(
    redis_url: str, stalling_upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = keys_block()
    export = shlex.split(commands[0])
    assert export[0] == "export" and export[1].startswith("IDEM_REDIS_URL=redis://")
    env = {**os.environ, "IDEM_REDIS_URL": redis_url}  # the test's Redis, not the doc's
    env.pop("IDEM_ADMIN_TOKEN", None)
    shutil.copytree(ROOT / "config", tmp_path / "config")  # relative paths as written

    # The config's own orders route leaves an UNKNOWN outcome for the doc's key and tenant.
    monkeypatch.setenv("IDEM_REDIS_URL", redis_url)
    monkeypatch.setenv("LEGACY_API", stalling_upstream)
    settings = load_settings(ROOT / "config" / "legacy-api.yaml")
    orders = settings.routes[0]
    assert orders.name == "orders" and orders.on_unknown_outcome == "record"
    quick = orders.model_copy(update={"timeouts": Timeouts(total=0.3)})
    settings = settings.model_copy(update={"routes": (quick, *settings.routes[1:])})
    client = TestClient(TestServer(create_app(settings, redis_url), host="127.0.0.1"))
    await client.start_server()
    headers = {"Idempotency-Key": "order-1001", "X-Tenant-Id": "acme"}

    async def leave_unknown_outcome() -> None:
        answer = await client.post("/v1/orders", json={"sku": "a"}, headers=headers)
        assert answer.headers.get("Idempotency-Outcome") == "unknown"

    async def run(command: str) -> tuple[int, str]:
        args = shlex.split(command)
        shell = args[0] != "idem-gateway"
        if not shell:  # the console script's target, in this interpreter
            args = [sys.executable, "-m", "gateway", *args[1:]]
        done = await asyncio.to_thread(
            subprocess.run, command if shell else args, shell=shell, cwd=tmp_path, env=env,
            capture_output=True, timeout=60,
        )  # fmt: skip
        return done.returncode, (done.stdout + done.stderr).decode()

    try:
        ran = []
        for command in commands[1:]:
            if command.startswith("idem-gateway"):
                await leave_unknown_outcome()  # each operation starts from one (see the doc)
            code, out = await run(command)
            assert code == 0, f"{command}: exit {code}: {out}"
            ran.append(shlex.split(command)[4] if command.startswith("idem-gateway") else "sh")
            if ran[-1] == "show":
                assert orjson.loads(out)["state"] == "unknown", out
        assert ran == ["show", "purge", "resolve", "sh", "resolve"]
        # The last command stored the result the block wrote: retries replay it.
        replay = await client.post("/v1/orders", json={"sku": "a"}, headers=headers)
        assert replay.status == 201 and replay.headers["Idempotent-Replayed"] == "true"
        assert await replay.read() == (tmp_path / "order.json").read_bytes()
    finally:
        await client.close()
