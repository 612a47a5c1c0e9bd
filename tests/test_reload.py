"""SIGHUP reloads the config of a running gateway process; a broken file is refused."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp.test_utils import TestServer

from gateway.config.loading import settings_from_dict
from gateway.http.app import LIVE
from gateway.ops.reload import apply
from testkit.polling import until
from testkit.procs import GatewayProcess

from .gateways import GatewayFactory
from .upstream import CountingUpstream


def config(origin: str, redis_url: str, admin_port: int | None, **route: Any) -> dict[str, Any]:
    """`admin_port` None: one the GatewayProcess holds (its `admin_port`)."""
    return {
        "redis": {"url": redis_url},
        "admin": {} if admin_port is None else {"port": admin_port},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, **route}],
    }


async def test_sighup_changes_routes_for_new_requests_and_refuses_a_broken_file(
    upstream, redis_url: str, tmp_path: Path
) -> None:
    counting, origin = upstream
    other = CountingUpstream()
    other_server = TestServer(other.app(), host="127.0.0.1")
    await other_server.start_server()
    other_origin = str(other_server.make_url("")).rstrip("/")
    gateway = GatewayProcess(config(origin, redis_url, None), tmp_path)
    admin_port = gateway.admin_port
    await asyncio.to_thread(gateway.start)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{admin_port}/healthz") as resp:
                assert resp.status == 200
            async with http.post(f"{gateway.url}/pay") as resp:
                assert resp.status == 201  # no key needed yet
            held = asyncio.ensure_future(
                http.post(f"{gateway.url}/gate", headers={"Idempotency-Key": "held"})
            )
            await asyncio.wait_for(counting.entered.wait(), 10)

            changed = config(origin, redis_url, admin_port, require_key=True)
            changed["routes"].append(
                {"name": "moved", "path_prefix": "/pay/moved", "upstream": other_origin}
            )
            gateway.config_path.write_text(yaml.safe_dump(changed))
            gateway.signal(signal.SIGHUP)
            await until(lambda: _logged(gateway, "config reloaded"), what="the reload")

            async with http.post(f"{gateway.url}/pay") as resp:
                assert resp.status == 400  # the new rule applies to new requests
            headers = {"Idempotency-Key": "m-1"}
            async with http.post(f"{gateway.url}/pay/moved", headers=headers) as resp:
                assert resp.status == 201
            assert other.count("/pay/moved", "m-1") == 1  # a session for the new origin
            counting.release.set()
            async with await held as resp:
                assert resp.status == 201  # the request running during the reload finished

            gateway.config_path.write_text("routes: [{name: broken}]\n")
            gateway.signal(signal.SIGHUP)
            await until(lambda: _logged(gateway, "config reload refused"), what="the refusal")
            assert "routes[0].path_prefix: is required" in gateway.log()
            async with http.post(f"{gateway.url}/pay") as resp:
                assert resp.status == 400  # the running config stayed
            async with http.post(f"{gateway.url}/pay/moved", headers=headers) as resp:
                assert resp.headers["Idempotent-Replayed"] == "true"
        assert gateway.process is not None and gateway.process.poll() is None
    finally:
        assert gateway.stop() == 0
        await other_server.close()


async def _logged(gateway: GatewayProcess, text: str) -> bool:
    return text in gateway.log()


async def test_a_reload_refuses_a_route_to_the_listener_it_keeps(
    make_gateway: GatewayFactory, upstream, redis_url: str, tmp_path: Path, caplog: Any
) -> None:
    """A reload keeps the listener (it needs a restart), so a new route is checked against
    the kept one: a file that moves `listen.port` and routes to the old port would forward
    every request on that route to the gateway itself."""
    _, origin = upstream
    kept, moved = 18080, 18081  # in the settings alone: the test's gateway binds port 0
    running = {**config(origin, redis_url, None), "listen": {"port": kept}}
    client = await make_gateway(settings=settings_from_dict(running))
    loop = {"name": "loop", "path_prefix": "/loop", "upstream": f"http://127.0.0.1:{kept}"}
    changed = {**running, "listen": {"port": moved}, "routes": [*running["routes"], loop]}
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(changed))
    assert apply(client.server.app, path) is False
    assert "config reload refused" in caplog.text and "own listener" in caplog.text
    assert [route.name for route in client.server.app[LIVE].settings.routes] == ["api"]


async def test_a_reload_that_moves_the_state_folder_says_it_needs_a_restart(
    make_gateway: GatewayFactory, upstream, redis_url: str, tmp_path: Path, caplog: Any
) -> None:
    """The journal and the embedded Redis live in the state folder opened at start."""
    _, origin = upstream
    running = {**config(origin, redis_url, None), "state_dir": str(tmp_path / "a")}
    client = await make_gateway(settings=settings_from_dict(running))
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({**running, "state_dir": str(tmp_path / "b")}))
    assert apply(client.server.app, path) is True
    assert "state_dir change(s) need a restart" in caplog.text
    assert client.server.app[LIVE].settings.state_dir == str(tmp_path / "a")
