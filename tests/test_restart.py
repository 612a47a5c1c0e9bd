"""Replays survive the gateway: a new process on the same Redis replays byte for byte."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from testkit.procs import GatewayProcess

# Headers each answer carries for itself, replays included.
PER_ANSWER = ("date", "server", "x-request-id", "idempotency-expires")


async def test_replay_survives_gateway_restart(upstream, redis_url: str, tmp_path: Path) -> None:
    counting, origin = upstream
    config = {
        "redis": {"url": redis_url},
        "loop": "asyncio",
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
    }
    headers = {"Idempotency-Key": "restart-1"}
    first = GatewayProcess(dict(config), tmp_path).start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{first.url}/stream?size=300000", headers=headers) as r,
        ):
            assert r.status == 200
            body = await r.read()
            head = [(k, v) for k, v in r.headers.items() if k.lower() not in PER_ANSWER]
    finally:
        assert first.stop() == 0
    second = GatewayProcess(dict(config), tmp_path).start()
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{second.url}/stream?size=300000", headers=headers) as r,
        ):
            assert r.status == 200
            assert r.headers["Idempotent-Replayed"] == "true"
            assert await r.read() == body
            replay_head = [(k, v) for k, v in r.headers.items() if k.lower() not in PER_ANSWER]
    finally:
        second.stop()
    assert [h for h in replay_head if h[0] not in ("Idempotent-Replayed", "Content-Length")] == [
        h for h in head if h[0] not in ("Transfer-Encoding", "Content-Length")
    ]
    assert counting.count("/stream") == 1
