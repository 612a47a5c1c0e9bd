"""The local journal of outcomes Redis has not taken: what it holds is what a restart replays,
whatever order its writes and marks come in and whatever a full disk cuts short."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.config.loading import settings_from_dict
from gateway.http.app import SERVICES, create_app
from gateway.store import journal as journal_module
from gateway.store.journal import Journal, orphans
from gateway.telemetry.metrics import Metrics
from testkit.polling import until
from testkit.redis_server import RedisServer

from .faultkit import fill, metrics_of, outcome, value
from .orders import Orders, reconcile_config
from .upstream import CountingUpstream, serving_app

KEY = {"Idempotency-Key": "k-journal"}


def unstored_keys(folder: Path) -> list[str]:
    return [each.key for _, outcomes in orphans(folder) for each in outcomes]


def test_an_entry_in_its_fsync_survives_another_entry_marked_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`add` runs in a worker thread: an entry written and being fsynced (a slow disk) while
    the only other entry is marked stored must stay in the file, not be emptied with it."""
    journal = Journal(tmp_path)
    first = journal.add(outcome("first"))
    in_fsync, disk_returns = threading.Event(), threading.Event()
    fsync = journal_module.os.fsync

    def slow_fsync(fd: int) -> None:
        fsync(fd)
        in_fsync.set()
        assert disk_returns.wait(10)

    monkeypatch.setattr(journal_module.os, "fsync", slow_fsync)
    second = threading.Thread(target=journal.add, args=(outcome("second"),))
    second.start()
    assert in_fsync.wait(10)
    marked = threading.Thread(target=journal.stored, args=(first,))  # as settle runs it
    marked.start()
    disk_returns.set()
    second.join(10)
    marked.join(10)
    assert journal.depth == 1
    journal.close()  # as a SIGKILL would leave it: the file stays, its lock free
    assert unstored_keys(tmp_path) == ["second"]


def test_a_line_a_full_disk_cut_short_does_not_take_the_next_entry_with_it(
    tmp_path: Path,
) -> None:
    """A write the file-size limit cuts short (EFBIG, as ENOSPC on a full disk) fails its
    entry, and leaves no half line: the entry written once there is room again is read back
    by the next start. Run in a child process, whose file-size limit is its own."""
    child = textwrap.dedent(
        f"""
        import resource, signal, sys
        from pathlib import Path
        sys.path[:0] = {sys.path!r}
        from tests.faultkit import outcome
        from gateway.store.journal import Journal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        journal = Journal(Path({str(tmp_path)!r}))
        journal.add(outcome("before"))
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
        try:
            journal.add(outcome("cut", b"x" * 8192))
        except OSError:
            print("cut refused")
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        journal.add(outcome("after"))
        print("depth", journal.depth)
        journal.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["cut refused", "depth 2"]
    assert unstored_keys(tmp_path) == ["before", "after"]


def test_a_journal_removed_after_the_listing_is_passed_over(tmp_path: Path) -> None:
    """A starting gateway lists the journals, then opens each: one its owner removed in
    between (a clean stop) is passed over, not a failed start."""
    gone = Journal(tmp_path)
    kept = Journal(tmp_path)
    kept.add(outcome("kept"))
    kept.close()
    listed = sorted(tmp_path.glob("*.jsonl"))
    gone.close()  # empty: removed at its clean stop

    class Listing(type(tmp_path)):  # type: ignore[misc]
        def glob(self, pattern: str) -> list[Path]:  # type: ignore[override]
            return listed

    assert unstored_keys(Listing(tmp_path)) == ["kept"]


@contextlib.asynccontextmanager
async def gateway_on_a_full_disk(
    disk: Path, tmp_path: Path, route: dict[str, Any]
) -> AsyncIterator[tuple[TestClient, RedisServer]]:
    """An in-process gateway whose state folder (the journal) is on `disk`, with a Redis of
    its own that the test can stop."""
    redis_server = RedisServer()
    redis_server.start()
    settings = settings_from_dict(
        {
            "state_dir": str(disk / "state"),
            "blob": {"url": f"file://{tmp_path}/blobs"},
            "redis": {"socket_timeout": "300ms", "breaker": {"failures": 1000}},
            "routes": [{"name": "api", "path_prefix": "/", **route}],
        }
    )
    client = TestClient(
        TestServer(create_app(settings, redis_server.url, Metrics()), host="127.0.0.1")
    )
    await client.start_server()
    assert redis_server.process is not None
    try:
        yield client, redis_server
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
        await client.close()
        redis_server.close()


async def whole_answer(client: TestClient, path: str, headers: dict[str, str]) -> bytes:
    async with client.post(path, data=b"{}", headers=headers) as answer:
        return await answer.read()


CUT = (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)


async def replay_once_stored(client: TestClient, path: str, headers: dict[str, str]) -> Any:
    """The retry's answer once the kept outcome is stored (409 until then; 10 s at most)."""
    for _ in range(200):
        answer = await client.post(path, data=b"{}", headers=headers)
        if answer.status != 409:
            return answer
        await asyncio.sleep(0.05)  # pacing the retries, as a client would
    raise AssertionError("the kept outcome was not stored in 10 s")


async def test_redis_down_and_the_journal_disk_full_gives_no_whole_answer_and_loses_none(
    upstream: tuple[CountingUpstream, str], full_disk: Path, tmp_path: Path
) -> None:
    """Neither Redis nor the journal takes the outcome: the client gets no complete answer
    (a crash now would lose it, and a retry after the lease would run the call again); the
    gateway keeps it and stores it once Redis is back, and the retry replays it."""
    counting, origin = upstream
    async with gateway_on_a_full_disk(full_disk, tmp_path, {"upstream": origin}) as (
        client,
        redis_server,
    ):
        assert redis_server.process is not None
        first = asyncio.ensure_future(whole_answer(client, "/gate", KEY))
        await counting.entered.wait()
        fill(full_disk)
        redis_server.process.send_signal(signal.SIGSTOP)
        counting.release.set()
        with pytest.raises(CUT):
            await first
        counted = {"route": "api", "method": "POST"}
        assert value(metrics_of(client), "idem_requests_total", outcome="error", **counted) == 1
        assert value(metrics_of(client), "idem_requests_total", outcome="forwarded", **counted) == 0
        redis_server.process.send_signal(signal.SIGCONT)
        replay = await replay_once_stored(client, "/gate", KEY)
        assert replay.status == 201
        assert replay.headers["Idempotent-Replayed"] == "true"
        assert (await replay.read()).startswith(b"gated #")
    assert counting.count("/gate") == 1


async def test_an_unknown_outcome_kept_only_in_memory_is_not_answered_whole(
    upstream: tuple[CountingUpstream, str], full_disk: Path, tmp_path: Path
) -> None:
    """`on_unknown_outcome: record` while neither Redis nor the journal takes the UNKNOWN
    record: the client gets no whole 502 (a crash would lose the record, and a retry would
    run the call again, which that mode promises never to do by itself); the record is
    stored once Redis is back, and retries replay it."""
    counting, origin = upstream
    route = {"upstream": origin, "on_unknown_outcome": "record", "timeouts": {"total": "300ms"}}
    async with gateway_on_a_full_disk(full_disk, tmp_path, route) as (client, redis_server):
        assert redis_server.process is not None
        first = asyncio.ensure_future(whole_answer(client, "/stall", KEY))
        await counting.entered.wait()
        fill(full_disk)
        redis_server.process.send_signal(signal.SIGSTOP)
        with pytest.raises(CUT):
            await first
        redis_server.process.send_signal(signal.SIGCONT)
        replay = await replay_once_stored(client, "/stall", KEY)
        assert replay.status == 502
        assert replay.headers["Idempotency-Outcome"] == "unknown"
    assert counting.count("/stall") == 1


class StoppingOrders(Orders):
    """Orders whose POST first runs `on_create` (here: Redis stops, the disk is full)."""

    on_create: Callable[[], None] = staticmethod(lambda: None)

    async def create(self, request: web.Request) -> web.StreamResponse:
        self.on_create()
        return await super().create(request)


async def test_a_reconciled_answer_kept_only_in_memory_is_not_answered_whole(
    full_disk: Path, tmp_path: Path
) -> None:
    """The answer was lost, the lookup says the order exists, and neither Redis nor the
    journal takes the reconciled record: the client gets no whole 201, and retries replay
    the reconciled answer once Redis is back."""
    orders = StoppingOrders()
    orders.cut = "after"
    async with serving_app(orders.app()) as origin:
        route = {"upstream": origin, "reconcile": reconcile_config(origin)}
        async with gateway_on_a_full_disk(full_disk, tmp_path, route) as (client, redis_server):
            process = redis_server.process
            assert process is not None

            def stop() -> None:
                fill(full_disk)
                process.send_signal(signal.SIGSTOP)

            orders.on_create = stop
            headers = {"Authorization": "Bearer t1", "Idempotency-Key": "rk1"}
            with pytest.raises(CUT):
                await whole_answer(client, "/orders", headers)
            process.send_signal(signal.SIGCONT)
            replay = await replay_once_stored(client, "/orders", headers)
            assert replay.status == 201
            assert replay.headers["Idempotency-Outcome"] == "reconciled"
    assert orders.runs["rk1"] == 1


async def test_a_record_stored_late_keeps_its_blob_for_its_whole_retention(
    upstream: tuple[CountingUpstream, str], tmp_path: Path
) -> None:
    """Redis takes a journaled outcome long after its blob was written (an outage): the
    record's retention runs from then, and so must the blob's age, or the sweep removes the
    blob of a live record and its replays answer 502 before the retention ends."""
    counting, origin = upstream
    redis_server = RedisServer()
    redis_server.start()
    blobs = tmp_path / "blobs"
    settings = settings_from_dict(
        {
            "state_dir": str(tmp_path / "state"),
            "blob": {"url": f"file://{blobs}", "sweep_interval": "1h"},
            "redis": {"socket_timeout": "300ms", "breaker": {"failures": 1000}},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        }
    )
    app = create_app(settings, redis_server.url, Metrics())
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    assert redis_server.process is not None
    try:
        first = asyncio.ensure_future(client.post("/blob?size=200000&gate=1", headers=KEY))
        await counting.entered.wait()
        redis_server.process.send_signal(signal.SIGSTOP)
        counting.release.set()
        answer = await first
        body = await answer.read()
        assert len(body) == 200_000  # journaled, then answered
        [blob] = list(blobs.iterdir())
        written_long_ago = time.time() - settings.longest_hold() - 60  # an outage that long
        os.utime(blob, (written_long_ago, written_long_ago))
        redis_server.process.send_signal(signal.SIGCONT)
        await until(lambda: app[SERVICES].journal.depth == 0)  # stored now
        await app[SERVICES].blobs.sweep(settings.longest_hold())  # as the periodic sweep
        replay = await client.post("/blob?size=200000&gate=1", headers=KEY)
        assert replay.status == 200
        assert await replay.read() == body
        assert counting.count("/blob") == 1
    finally:
        redis_server.process.send_signal(signal.SIGCONT)
        await client.close()
        redis_server.close()


def test_a_closed_journal_writes_into_no_file_that_took_its_number(tmp_path: Path) -> None:
    """A store that finishes after the drain (Redis was down longer) marks its entry on a
    journal already closed: the file that took the closed file's number is left alone, and
    the journal keeps the entry for the next start."""
    journal = Journal(tmp_path / "journal")
    entry = journal.add(outcome("kept"))
    journal.close()
    other = tmp_path / "other"
    other.write_bytes(b"someone else's data\n")
    fd = os.open(other, os.O_RDWR | os.O_APPEND)  # the lowest free number: the journal's
    try:
        journal.stored(entry)
        with pytest.raises(OSError):
            journal.add(outcome("late"))
    finally:
        os.close(fd)
    assert other.read_bytes() == b"someone else's data\n"
    assert unstored_keys(tmp_path / "journal") == ["kept"]
