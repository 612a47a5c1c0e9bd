"""`on_unknown_outcome` against an upstream that stalls or resets after taking the request."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import types
from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.telemetry.logs import FIELDS
from testkit.ports import Port

from .faultkit import metrics_of, redis_keys, state, value
from .gateways import GatewayFactory, gateway_settings
from .upstream import CountingUpstream, read_raw_request

KEY = {"Idempotency-Key": "k-unknown"}
STALL = {"timeouts": {"total": "300ms"}, "lease": "30s"}


async def test_stall_release_answers_504_and_a_retry_runs_again(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    counting, _ = upstream
    client = await make_gateway(on_unknown_outcome="release", **STALL)
    first = await client.post("/stall", data=b"x", headers={**KEY, "X-Request-Id": "r-1"})
    assert first.status == 504
    assert "Idempotency-Outcome" not in first.headers
    assert redis_keys(redis_url) == []
    assert (await client.post("/stall", data=b"x", headers=KEY)).status == 504
    assert counting.count("/stall") == 2
    assert value(metrics_of(client), "idem_unknown_outcomes_total", route="api", mode="release")
    said = [getattr(r, FIELDS) for r in caplog.records if "event" in getattr(r, FIELDS, {})]
    assert said[0] == {
        "event": "unknown-outcome",
        "route": "api",
        "request_id": "r-1",
        "failure": "timeout",
    }
    assert [fields["event"] for fields in said] == ["unknown-outcome"] * 2


async def test_stall_keep_answers_504_and_retries_get_409(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(on_unknown_outcome="keep", **STALL)
    first = await client.post("/stall", data=b"x", headers=KEY)
    assert first.status == 504
    assert state(redis_url) == b"P"
    retry = await client.post("/stall", data=b"x", headers=KEY)
    assert retry.status == 409
    assert counting.count("/stall") == 1


async def test_stall_record_replays_502_outcome_unknown(
    make_gateway: GatewayFactory, upstream: tuple[CountingUpstream, str], redis_url: str
) -> None:
    counting, _ = upstream
    client = await make_gateway(on_unknown_outcome="record", **STALL)
    first = await client.post("/stall", data=b"x", headers=KEY)
    assert first.status == 502
    assert first.headers["Idempotency-Outcome"] == "unknown"
    assert orjson.loads(await first.read())["type"].endswith("outcome-unknown")
    assert state(redis_url) == b"U"
    for _ in range(2):
        retry = await client.post("/stall", data=b"x", headers=KEY)
        assert retry.status == 502
        assert retry.headers["Idempotency-Outcome"] == "unknown"
        assert retry.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/stall") == 1


@pytest.mark.parametrize(
    ("mode", "stored", "retry_status", "calls"),
    [("release", None, 502, 2), ("keep", b"P", 409, 1), ("record", b"U", 502, 1)],
)
async def test_reset_mid_answer(
    make_gateway: GatewayFactory,
    upstream: tuple[CountingUpstream, str],
    redis_url: str,
    mode: str,
    stored: bytes | None,
    retry_status: int,
    calls: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The upstream sends a head and part of the body, then cuts. A recorded answer's end is
    held back until it is stored, so the client gets a clean 502, not half an answer; the
    log says so in a line, with no traceback (a traceback is for the gateway's own faults)."""
    counting, _ = upstream
    client = await make_gateway(on_unknown_outcome=mode, lease="30s")
    first = await client.post("/reset", data=b"x", headers=KEY)
    assert first.status == 502
    assert orjson.loads(await first.read())["status"] == 502
    assert (first.headers.get("Idempotency-Outcome") == "unknown") is (mode == "record")
    assert state(redis_url) == stored
    retry = await client.post("/reset", data=b"x", headers=KEY)
    assert retry.status == retry_status
    if mode == "record":
        assert retry.headers["Idempotency-Outcome"] == "unknown"
        assert retry.headers["Idempotent-Replayed"] == "true"
    assert counting.count("/reset") == calls
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


@pytest.mark.parametrize("mode", ["release", "keep", "record"])
async def test_connect_failure_always_releases(
    make_gateway: GatewayFactory, redis_url: str, mode: str, refused_port: Port
) -> None:
    dead = refused_port.url
    client = await make_gateway(settings=gateway_settings(dead, on_unknown_outcome=mode))
    resp = await client.post("/pay", data=b"x", headers=KEY)
    assert resp.status == 502
    assert "Idempotency-Outcome" not in resp.headers
    assert orjson.loads(await resp.read())["type"].endswith("upstream-unreachable")
    assert redis_keys(redis_url) == []


@contextlib.asynccontextmanager
async def _pausing_upstream(pause: float) -> AsyncIterator[tuple[str, list[int]]]:
    """Answers 201 with its head and half its body at once, the rest after `pause`."""
    calls: list[int] = []
    handlers: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await read_raw_request(reader)
            calls.append(1)
            writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\nhello")
            await writer.drain()
            await asyncio.sleep(pause)  # the upstream's own slowness, the fault under test
            writer.write(b"world")
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", calls
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


@pytest.mark.parametrize(
    "timeouts",
    [{"total": "300ms"}, {"total": "20s", "read": "200ms"}],
    ids=["read-defaults-to-total", "read-of-its-own"],
)
async def test_a_body_stall_longer_than_read_is_an_unknown_outcome(
    make_gateway: GatewayFactory, redis_url: str, timeouts: dict[str, str]
) -> None:
    """Each wait for body bytes is bounded by `timeouts.read` (by default `total`), whether
    aiohttp's `sock_read` times it or the gateway does."""
    async with _pausing_upstream(pause=3.0) as (origin, calls):
        settings = gateway_settings(origin, on_unknown_outcome="record", timeouts=timeouts)
        client = await make_gateway(settings=settings)
        first = await client.post("/pay", data=b"x", headers=KEY)
        assert first.status == 502
        assert first.headers["Idempotency-Outcome"] == "unknown"
        assert state(redis_url) == b"U"
        assert len(calls) == 1


async def test_a_body_pause_within_read_completes_though_longer_than_total(
    make_gateway: GatewayFactory, redis_url: str
) -> None:
    """`total` times the head only: a body pause within `read` is no timeout."""
    async with _pausing_upstream(pause=1.0) as (origin, calls):
        timeouts = {"total": "300ms", "read": "5s"}
        settings = gateway_settings(origin, on_unknown_outcome="record", timeouts=timeouts)
        client = await make_gateway(settings=settings)
        first = await client.post("/pay", data=b"x", headers=KEY)
        assert first.status == 201
        assert await first.read() == b"helloworld"
        assert state(redis_url) == b"C"
        assert len(calls) == 1


def _frames_holding_a_body(size: int) -> list[str]:
    """Frames (outside this file) whose locals still hold a bytes object of `size`."""
    here = __file__
    return [
        f"{frame.f_code.co_filename}:{frame.f_code.co_name}"
        for frame in gc.get_objects()
        if isinstance(frame, types.FrameType)
        and frame.f_code.co_filename != here
        and any(isinstance(v, bytes) and len(v) == size for v in frame.f_locals.values())
    ]


async def test_a_failed_upstream_call_lets_go_of_its_body_at_once(
    make_gateway: GatewayFactory, redis_url: str, refused_port: Port
) -> None:
    """A connect failure's exception sits in a reference cycle (asyncio's connection
    attempts), whose frames hold the request body: with an upstream down, retries with large
    bodies would pile up until the collector runs. The gateway clears those frames."""
    size = (1 << 19) + 7  # under aiohttp's warning for large raw bodies
    dead = refused_port.url
    client = await make_gateway(settings=gateway_settings(dead))
    gc.collect()
    gc.disable()  # nothing but the gateway itself may free what the failures keep
    try:
        for i in range(3):
            resp = await client.post("/pay", data=b"x" * size, headers={"Idempotency-Key": f"k{i}"})
            assert resp.status == 502
        assert _frames_holding_a_body(size) == []
    finally:
        gc.enable()
