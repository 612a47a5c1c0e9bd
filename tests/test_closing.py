"""Start-up and shutdown close what they opened: each step of a start made to fail in turn
leaves no file, socket, connection, task, thread or process behind (the embedded
redis-server included), and a close that fails at shutdown is one log line while the
others still run."""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web

from gateway.blobs.file import FileBlobStore
from gateway.config.loading import settings_from_dict
from gateway.config.settings import Settings
from gateway.config.tls import UpstreamTls
from gateway.errors import ConfigError
from gateway.http import app as gateway_app
from gateway.http.app import create_app
from gateway.ops.supervisor.parent import supervise
from gateway.store import embedded
from gateway.store.journal import Journal
from gateway.telemetry.metrics import Metrics
from testkit.polling import until

from .upstream import CountingUpstream, serving_app

BROKEN = "broken on purpose"


def held() -> dict[str, Any]:
    """What this process holds: its open files and sockets (by what they are), its threads
    (the event loops' own worker threads aside: they belong to the loop, not to what ran on
    it) and its child processes."""
    files: collections.Counter[str] = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own, closed since
            continue
        if not target.startswith("/proc/"):
            files[target] += 1
    threads = sorted(
        t.name for t in threading.enumerate() if not t.name.startswith(("asyncio_", "Dummy-"))
    )
    children: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as listed:
            children.update(int(pid) for pid in listed.read().split())
    return {"files": files, "threads": threads, "children": children}


def _differences(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if now["files"] != before["files"]:
        out["files opened"] = now["files"] - before["files"]
        out["files closed"] = before["files"] - now["files"]
    for what in ("threads", "children"):
        if now[what] != before[what]:
            out[what] = now[what]
    return out


def redis_clients(url: str) -> int:
    """How many clients the test's Redis has, the asking one aside."""
    with redis.Redis.from_url(url) as client:
        return len(client.client_list()) - 1


async def nothing_left(
    before: dict[str, Any], tasks: set[asyncio.Task[Any]], url: str, clients: int
) -> None:
    """Poll until what the process holds is as `before` (a closed transport closes its
    socket at the loop's next turn), then say what is left if it is not."""

    def settled() -> bool:
        return not _differences(before, held()) and asyncio.all_tasks() <= tasks

    try:
        await until(settled, 5.0, "nothing left open")
    except AssertionError:
        left = asyncio.all_tasks() - tasks
        pytest.fail(f"left open: {_differences(before, held())}, tasks {left}")
    await until(lambda: redis_clients(url) == clients, 5.0, "no Redis connection left")


@pytest.fixture
async def origin() -> AsyncIterator[str]:
    async with serving_app(CountingUpstream().app()) as url:
        yield url


def settings_of(origin: str, redis_url: str, tmp_path: Path, **extra: Any) -> Settings:
    raw: dict[str, Any] = {
        "redis": {"url": redis_url},
        "blob": {"url": f"file://{tmp_path}/blobs"},
        "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
        **extra,
    }
    return settings_from_dict(raw)


def _raises(*_: Any, **__: Any) -> Any:
    raise RuntimeError(BROKEN)


def _bad_tls(self: UpstreamTls) -> Any:
    raise ValueError("the CA file is gone")  # as a file removed since the config was read


# Each step of the start, in order, made to fail: by the name `gateway.http.app` calls it
# under (a pure module in both builds: its names can be patched).
STEPS = [
    "private_folder", "open_blob_store", "sweep_periodically", "make_client", "sender_for",
    "Store", "upstream_tls", "_traced", "Journal", "Fleet", "refuse_evicting", "warn_unfenced",
    "replay_journal",
]  # fmt: skip


@pytest.mark.parametrize("step", STEPS)
async def test_a_start_that_fails_at_any_step_closes_what_it_had_opened(
    step: str,
    origin: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_of(origin, redis_url, tmp_path)
    if step == "upstream_tls":
        monkeypatch.setattr(UpstreamTls, "context", _bad_tls)
    else:
        monkeypatch.setattr(gateway_app, step, _raises)
    tasks, before, clients = asyncio.all_tasks(), held(), redis_clients(redis_url)
    runner = web.AppRunner(create_app(settings, redis_url, Metrics()), handle_signals=False)
    with pytest.raises(ConfigError if step == "upstream_tls" else RuntimeError):
        await runner.setup()
    await nothing_left(before, tasks, redis_url, clients)


async def test_a_blob_store_that_refuses_the_start_leaves_nothing_open(
    origin: str, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    settings = settings_of(origin, redis_url, tmp_path, blob={"url": f"file://{tmp_path}/a-file"})
    tasks, before, clients = asyncio.all_tasks(), held(), redis_clients(redis_url)
    runner = web.AppRunner(create_app(settings, redis_url, Metrics()), handle_signals=False)
    with pytest.raises(ConfigError, match=r"blob\.url"):
        await runner.setup()
    await nothing_left(before, tasks, redis_url, clients)


def _closes_then_fails(close: Callable[..., Any]) -> Callable[..., Any]:
    def failing(self: object) -> Any:
        result = close(self)
        if asyncio.iscoroutine(result):

            async def then_fail() -> None:
                await result
                raise OSError(f"{BROKEN}\nsecond line")

            return then_fail()
        raise OSError(f"{BROKEN}\nsecond line")

    return failing


async def test_closes_that_fail_at_shutdown_are_one_line_each_and_the_others_still_run(
    origin: str,
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The journal's close fails, then the blob store's (the first and the last to close
    after the drain, around the upstreams' and Redis's): each says so in one line, the
    upstreams' and Redis's clients close all the same, and the shutdown goes on."""
    monkeypatch.setattr(Journal, "close", _closes_then_fails(Journal.close))
    monkeypatch.setattr(FileBlobStore, "close", _closes_then_fails(FileBlobStore.close))
    settings = settings_of(origin, redis_url, tmp_path)
    tasks, before, clients = asyncio.all_tasks(), held(), redis_clients(redis_url)
    runner = web.AppRunner(create_app(settings, redis_url, Metrics()), handle_signals=False)
    await runner.setup()
    assert redis_clients(redis_url) > clients  # the start-up checks asked Redis
    with caplog.at_level(logging.ERROR, logger="gateway"):
        await runner.cleanup()
    failed = [r.getMessage() for r in caplog.records if "closing" in r.getMessage()]
    assert failed == [
        f"closing the journal failed: OSError: {BROKEN} second line",
        f"closing the blob store failed: OSError: {BROKEN} second line",
    ]
    await nothing_left(before, tasks, redis_url, clients)


# The whole command's start (`cli.serve`, `ops.supervisor.parent.supervise`) with the
# embedded Redis, run in this process: each runs its own event loop.


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on (not the gateway)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _embedded_settings(state_dir: Path, origin: str, **extra: Any) -> Settings:
    return settings_from_dict(
        {
            "listen": {"host": "127.0.0.1", "port": 0},
            # asyncio's loop: uvloop's library keeps a pipe for signals from its first
            # handler on, for the process's life, which is not the gateway's to close.
            "loop": "asyncio",
            "redis": {"url": "embedded"},
            "state_dir": str(state_dir),
            "blob": {"url": f"file://{state_dir.parent}/blobs"},
            "routes": [{"name": "api", "path_prefix": "/", "upstream": origin}],
            **extra,
        }
    )


def _failing(step: str, monkeypatch: pytest.MonkeyPatch, busy: int, folder: Path) -> dict[str, Any]:
    """Break `step` of the command's start; the settings it needs for that."""
    if step == "embedded redis":  # the server never answers
        monkeypatch.setattr(embedded, "wait_ready", _no_answer)
    elif step == "blob store":
        (folder / "a-file").write_bytes(b"")
        return {"blob": {"url": f"file://{folder}/a-file"}}
    elif step == "admin listener":
        return {"admin": {"host": "127.0.0.1", "port": busy}}
    elif step == "eviction check":
        monkeypatch.setattr(gateway_app, "refuse_evicting", _refused)
    return {}


def _no_answer(*_: Any) -> None:
    raise TimeoutError(BROKEN)


async def _refused(*_: Any) -> None:
    raise ConfigError(BROKEN)


SERVE_STEPS = ["embedded redis", "blob store", "admin listener", "eviction check"]


@pytest.mark.parametrize("step", SERVE_STEPS)
def test_a_gateway_that_cannot_start_stops_its_redis_and_closes_its_socket(
    step: str,
    state_dir: Path,
    busy_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.cli import serve

    origin = "http://127.0.0.1:9"  # never called
    extra = _failing(step, monkeypatch, busy_port, tmp_path)
    settings = _embedded_settings(state_dir, origin, **extra)
    before = held()
    with pytest.raises(ConfigError):
        serve(settings)
    _nothing_left_after_a_command(before)


@pytest.mark.parametrize("step", ["embedded redis", "admin listener"])
def test_a_workers_parent_that_cannot_start_stops_its_redis_and_closes_its_sockets(
    step: str,
    state_dir: Path,
    busy_port: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = _failing(step, monkeypatch, busy_port, tmp_path)
    settings = _embedded_settings(state_dir, "http://127.0.0.1:9", **extra)
    before = held()
    with pytest.raises(ConfigError):
        supervise(settings, None, 2)
    _nothing_left_after_a_command(before)
    assert [p.name for p in state_dir.iterdir() if p.name.startswith("serving-")] == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_gateway_handed_its_sockets_closes_both_when_its_redis_cannot_start(
    workers: int, state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--listen-fd` and `--admin-fd` (as a harness that holds its ports hands them over):
    the sockets are the gateway's from its first step, closed when a later one fails."""
    from gateway.cli import serve

    monkeypatch.setattr(embedded, "wait_ready", _no_answer)
    before = held()
    listening, admin = socket.socket(), socket.socket()
    for sock in (listening, admin):
        sock.bind(("127.0.0.1", 0))
    admin_address = {"host": "127.0.0.1", "port": admin.getsockname()[1]}
    settings = _embedded_settings(state_dir, "http://127.0.0.1:9", admin=admin_address)
    listen_fd, admin_fd = listening.detach(), admin.detach()
    with pytest.raises(ConfigError):
        if workers == 1:
            serve(settings, listen_fd=listen_fd, admin_fd=admin_fd)
        else:
            supervise(settings, None, workers, listen_fd, admin_fd)
    _nothing_left_after_a_command(before)


def _nothing_left_after_a_command(before: dict[str, Any]) -> None:
    """Its event loop is closed, its redis-server stopped (and reaped), its threads ended."""
    assert _differences(before, held()) == {}
