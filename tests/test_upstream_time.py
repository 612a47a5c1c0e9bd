"""An upstream that times out or resets the connection took the upstream's time, not the
gateway's: the access log's `upstream_ms`, `idem_upstream_seconds` and
`idem_overhead_seconds` say so, for a keyed request and for one passed through."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest
from prometheus_client import generate_latest

from gateway.http.app import METRICS
from gateway.telemetry.logs import JsonFormatter

from .gateways import GatewayFactory, gateway_settings
from .scrape import sample
from .upstream import RawUpstream, serving

TIMEOUT = 1.0  # the route's
RESET_AFTER = 0.6  # how long the resetting upstream holds the request


class Hung(RawUpstream):
    """Reads the request and never answers."""

    async def respond(self, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(3600)
        return False


class Resets(RawUpstream):
    """Reads the request, waits, and drops the connection with no answer."""

    async def respond(self, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(RESET_AFTER)
        return False


@pytest.mark.parametrize(
    ("upstream", "keyed", "status", "waited"),
    [
        (Hung, True, 504, TIMEOUT),
        (Resets, True, 502, RESET_AFTER),
        (Hung, False, 504, TIMEOUT),
        (Resets, False, 502, RESET_AFTER),
    ],
    ids=["timeout-keyed", "reset-keyed", "timeout-passed", "reset-passed"],
)
async def test_a_failed_upstream_call_is_upstream_time(
    make_gateway: GatewayFactory,
    caplog: pytest.LogCaptureFixture,
    upstream: type[RawUpstream],
    keyed: bool,
    status: int,
    waited: float,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.http.server.access")
    async with serving(upstream()) as origin:
        settings = gateway_settings(origin, timeouts={"total": f"{TIMEOUT}s"})
        gw = await make_gateway(settings)
        if keyed:
            answer = await gw.post("/pay", data=b"{}", headers={"Idempotency-Key": "k"})
        else:  # a GET is not a protected method: passed through
            answer = await gw.get("/pay")
        assert answer.status == status
        text = generate_latest(gw.server.app[METRICS].registry).decode()
    lines = [
        JsonFormatter().format(r) for r in caplog.records if r.name == "gateway.http.server.access"
    ]
    assert len(lines) == 1
    logged = orjson.loads(lines[0])
    assert logged["outcome"] == ("error" if keyed else "unprotected")
    assert logged["upstream_ms"] >= waited * 1000 * 0.9
    assert logged["duration_ms"] - logged["upstream_ms"] < 500
    assert sample(text, "idem_upstream_seconds_count", route="api") == 1
    assert sample(text, "idem_upstream_seconds_sum", route="api") >= waited * 0.9
    assert sample(text, "idem_overhead_seconds_count", route="api") == 1
    assert sample(text, "idem_overhead_seconds_sum", route="api") < 0.5
