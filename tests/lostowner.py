"""The lost-owner kit: a key whose owner stopped renewing its lease after it may have sent
(a gateway SIGKILLed or frozen mid-call), made as that gateway leaves it, and a client
that retries until the gateway settles the key. Shared by test_owner_lost.py and
test_owner_lost_faults.py; conftest loads it as a plugin for its `gateways` fixture."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.core.claims import Claim
from gateway.core.fingerprint import fingerprint
from gateway.http.app import LIVE
from gateway.ops.keyops import locate
from testkit.polling import until
from testkit.procs import GatewayProcess
from testkit.stores import make_store

from .gateways import ADMIN_TOKEN

KEY = {"Idempotency-Key": "k-lost"}
AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
DEAD = "dead-owner"  # the lost owner's token

# What a client is answered: status, headers, body.
Answer = tuple[int, dict[str, str], bytes]


def code(answer: Answer) -> str:
    """The problem+json `code` of an answer."""
    return str(orjson.loads(answer[2])["code"])


# The route's reconcile lookup: the upstream's own view of a call by its key.


def reconcile(origin: str) -> dict[str, Any]:
    """The route's `reconcile` rule, asking GET /by-key/{key} at `origin` (201: happened)."""
    return {"url": f"{origin}/by-key/{{key}}", "status": 201, "timeout": "300ms"}


def lookup_app(find: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.Application:
    """A lookup upstream that answers GET /by-key/{key} with `find`."""
    app = web.Application()
    app.router.add_get("/by-key/{key}", find)
    return app


# Gateways as processes, that a test kills or freezes.


def process_config(origin: str, redis_url: str, **route: Any) -> dict[str, Any]:
    """A gateway process's config: the in-process gateways' route `api` (the same record
    keys, in format 1, as `gateways.gateway_settings` writes them), `route` its fields."""
    return {
        "loop": "asyncio",
        "log_level": "warning",
        "redis": {"url": redis_url, "record_format": 1},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin, **route}],
    }


@pytest.fixture
def gateways() -> Iterator[list[GatewayProcess]]:
    """The gateway processes a test starts (it appends them): resumed, then killed after."""
    started: list[GatewayProcess] = []
    yield started
    for gateway in started:
        if gateway.process is not None and gateway.process.poll() is None:
            gateway.process.send_signal(signal.SIGCONT)
            gateway.kill()


# A claim left as a dead (or frozen) gateway leaves it, written by the store itself.


def located(gw: TestClient) -> tuple[str, str, float]:
    """Record key, request fingerprint and retention of POST /gate, body x, under KEY."""
    route, names = locate(gw.server.app[LIVE].settings, "api", [], KEY["Idempotency-Key"])
    rkey = names[0]  # format 1's: a claim any gateway of either format finds
    return rkey, fingerprint(route.fingerprint, "POST", "/gate", "", (), b"x"), route.retention


async def claim_as_dead_owner(
    redis_url: str, gw: TestClient, lease: float = 0.2, mark_sent: bool = True, sent: bool = True
) -> None:
    """A claim of POST /gate under KEY, as `gw`'s route makes it, that its owner never
    renews: unsent-marked (`mark_sent`), then marked sent (`sent`)."""
    rkey, fp, retention = located(gw)
    store = make_store(redis_url)
    try:
        result = await store.claim(rkey, fp, DEAD, lease, retention, mark_sent=mark_sent)
        assert result.outcome is Claim.CLAIMED
        if sent:
            assert await store.sent(rkey, DEAD)
    finally:
        await store.close()


# A client's retries.


async def post(gw: TestClient, request_id: str | None = None) -> Answer:
    """POST /gate, body x, under KEY to an in-process gateway (with this X-Request-Id)."""
    headers = KEY if request_id is None else {**KEY, "X-Request-Id": request_id}
    resp = await gw.post("/gate", data=b"x", headers=headers)
    return resp.status, dict(resp.headers), await resp.read()


async def retry(session: aiohttp.ClientSession, url: str) -> Answer:
    """The same request to a gateway process at `url`."""
    async with session.post(f"{url}/gate", data=b"x", headers=KEY) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def settle(
    send: Callable[[], Awaitable[Answer]], timeout: float = 10.0, every: float = 0.05
) -> Answer:
    """Retry as a client would: `send` again while the answer is 409 in-flight (the lost
    owner's lease lasts), then the answer the gateway settles the key with."""
    answers: list[Answer] = []

    async def settled() -> bool:
        answers.append(await send())
        status, _, body = answers[-1]
        return not (status == 409 and orjson.loads(body)["code"] == "in-flight")

    await until(settled, timeout, "an answer other than 409 in-flight", every)
    return answers[-1]


async def settled(gw: TestClient, timeout: float = 10.0, request_id: str | None = None) -> Answer:
    """`settle` POST /gate on an in-process gateway."""
    return await settle(lambda: post(gw, request_id), timeout)
