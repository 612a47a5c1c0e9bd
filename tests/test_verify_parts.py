"""The parts of `loadtest.verify` the checker relies on: the upstream logs an execution
before it answers and its lookup agrees with the log; the fault proxy passes, swallows and
resets as told."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from loadtest.verify.history import read_executions
from loadtest.verify.proxy import FaultProxy
from loadtest.verify.upstream import Executions, digest
from testkit.polling import until


@contextlib.asynccontextmanager
async def upstream(log_path: Path) -> AsyncIterator[tuple[Executions, str]]:
    with open(log_path, "a") as log:
        executions = Executions(log, seed=1)
        runner = web.ServerRunner(web.Server(executions.handle), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            yield executions, f"http://127.0.0.1:{port}"
        finally:
            await runner.cleanup()


async def pay(session: aiohttp.ClientSession, origin: str, key: str, body: bytes) -> bytes:
    headers = {"Idempotency-Key": key, "Authorization": "Bearer t1", "X-Attempt": "a1"}
    async with session.post(f"{origin}/record/pay", data=body, headers=headers) as answer:
        assert answer.status == 201
        return await answer.read()


async def test_every_execution_is_logged_unique_and_found_by_the_lookup(tmp_path: Path) -> None:
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (executions, origin), aiohttp.ClientSession() as session:
        async with session.get(
            f"{origin}/record/by-key/k1", headers={"Authorization": "Bearer t1"}
        ) as miss:
            assert miss.status == 404
        first = await pay(session, origin, "k1", b'{"amount":1}')
        second = await pay(session, origin, "k1", b'{"amount":1}')
        assert first != second  # one body per execution
        async with session.get(
            f"{origin}/record/by-key/k1", headers={"Authorization": "Bearer t1"}
        ) as hit:
            assert hit.status == 200
            assert await hit.read() == first  # the key's first execution
        async with session.get(
            f"{origin}/record/by-key/k1", headers={"Authorization": "Bearer t2"}
        ) as other:
            assert other.status == 404  # another tenant's key of the same name never ran
        executions.log.flush()
    logged = list(read_executions(log))
    assert [(e.route, e.tenant, e.key, e.attempt) for e in logged] == [
        ("record", "t1", "k1", "a1")
    ] * 2
    assert logged[0].payload == digest(b'{"amount":1}')
    assert logged[0].body == digest(first) and logged[0].execution == orjson.loads(first)["id"]


async def test_a_reset_after_executing_is_logged_and_answers_nothing(tmp_path: Path) -> None:
    log = tmp_path / "executions.tsv"
    async with upstream(log) as (executions, origin), aiohttp.ClientSession() as session:
        executions.reset = 1.0
        executions.rng.random = lambda: 0.9  # type: ignore[method-assign]  # past half: after
        with pytest.raises(aiohttp.ClientError):
            await pay(session, origin, "k2", b"x")
        executions.log.flush()
    assert [e.fault for e in read_executions(log)] == ["reset"]


@contextlib.asynccontextmanager
async def proxied_echo() -> AsyncIterator[tuple[FaultProxy, int]]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        writer.close()

    target = await asyncio.start_server(echo, "127.0.0.1", 0)
    proxy = FaultProxy(target.sockets[0].getsockname()[1])
    front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    try:
        yield proxy, front.sockets[0].getsockname()[1]
    finally:
        front.close()
        target.close()


async def test_the_proxy_passes_swallows_then_resets_when_the_link_heals() -> None:
    async with proxied_echo() as (proxy, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        proxy.set_mode("blackhole")
        writer.write(b"lost")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(4), 0.3)
        proxy.set_mode("pass")  # the dead connection is reset, never resumed
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(reader.readexactly(4), 2)
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"again")
        assert await reader.readexactly(5) == b"again"
        proxy.set_mode("reset")
        with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readexactly(1), 2)
        writer.close()
        await until(lambda: not proxy.open)
