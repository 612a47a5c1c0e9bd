"""Fixtures: a real redis-server, a counting upstream and in-process gateways."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import settings

from gateway import build
from gateway.config.settings import Settings
from gateway.http.app import create_app
from gateway.ops.admin import AdminState, create_admin_app
from gateway.store.store import Store
from gateway.telemetry.metrics import Metrics
from testkit.ports import Port
from testkit.redis_server import RedisServer
from testkit.stores import make_store

from .blob_stores import FileBlobs, S3Blobs, StoredBlobs
from .gateways import ADMIN_TOKEN, AdminFactory, GatewayFactory, GatewayServer, gateway_settings
from .hostile import PLAIN, Wire, tls_wire
from .s3 import MotoServer
from .upstream import CountingUpstream, serving_app

# Hypothesis's examples have no deadline of their own: one took 425 ms beside other work,
# past the 200 ms default, and ran in 1.4 ms again. The suite's per-test timeout bounds them.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Kits whose fixtures some test files share (loaded as plugins: their fixtures are global).
pytest_plugins = ["tests.lostowner"]


class _ContainedLoops(asyncio.DefaultEventLoopPolicy):
    """The tests' loops run tasks as the gateway's do (`build.contain_compiled_tasks`)."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        build.contain_compiled_tasks(loop)
        return loop


if build.kind() == "compiled":  # pure: the default loops, unchanged
    asyncio.set_event_loop_policy(_ContainedLoops())


# A compiled coroutine throws an exception into the one it awaits as throw(type, exc, tb),
# deprecated since Python 3.12 (mypyc/mypyc#1214): made an error, as this suite makes every
# warning, it would replace each timeout and cancellation thrown into the gateway's
# coroutines. Python ignores a DeprecationWarning outside __main__, so the gateway sees none.
THREE_ARGUMENT_THROW = r"the \(type, exc, tb\) signature of throw\(\) is deprecated"


def pytest_configure(config: pytest.Config) -> None:
    if build.kind() == "compiled" and sys.version_info >= (3, 12):
        config.addinivalue_line(
            "filterwarnings", f"ignore:{THREE_ARGUMENT_THROW}:DeprecationWarning"
        )


def _set_handled_exception(exception: BaseException | None) -> None:
    # Called from a hook (a plain function, no generator running), so that this sets the
    # thread's own handled exception rather than a generator's.
    ctypes.pythonapi.PyErr_SetHandledException(ctypes.py_object(exception))


def _no_handled_exception_left(phase: str) -> None:
    """Nothing a test ran may leave an exception as the thread's handled one (a compiled
    coroutine run outside `build.contain_compiled_tasks` does): it would be chained to
    every later exception. Reported once, then cleared so that later tests are not blamed."""
    lingering = sys.exception()
    if lingering is None:
        return
    _set_handled_exception(None)
    where = "".join(traceback.format_exception(lingering)).rstrip()
    pytest.fail(f"{phase} left {lingering!r} as the thread's handled exception:\n{where}")


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are set up / torn down
def pytest_runtest_setup(item: pytest.Item) -> None:
    _no_handled_exception_left("the setup")


@pytest.hookimpl(trylast=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _no_handled_exception_left("the test")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _no_handled_exception_left("the teardown")


@pytest.fixture(autouse=True)
def root_log_level() -> Iterator[None]:
    """The root logger's level as each test found it: a reload run in process sets it to the
    config's `log_level` (info), which turned on the access log for every later test."""
    root = logging.getLogger()
    level = root.level
    yield
    root.setLevel(level)


@pytest.fixture(autouse=True)
def state_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Each test's gateways, in process or not, keep their own files in a folder of the test's
    own, removed after it. Its path is short, so that the embedded Redis's socket fits in it
    (a longer one goes to a temp folder that only the gateway's next start removes)."""
    folder = Path(tempfile.mkdtemp(prefix="st-")) / "state"
    monkeypatch.setenv("IDEM_STATE_DIR", str(folder))
    yield folder
    shutil.rmtree(folder.parent, ignore_errors=True)


def running_redis() -> Iterator[RedisServer]:
    """A real redis-server on a loopback port it holds, closed (and its data dir removed)
    after."""
    server = RedisServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session."""
    yield from running_redis()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session's Redis, emptied for this test (it is ours to flush)."""
    if redis_server.process is None:
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture
async def redis_store(redis_url: str) -> AsyncIterator[Store]:
    """A Store on the test's Redis (`stores.make_store`, its defaults), closed after."""
    store = make_store(redis_url)
    yield store
    await store.close()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server for one test that stops, kills or restarts it."""
    yield from running_redis()


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[CountingUpstream, str]]:
    """A counting upstream on a loopback port, and its origin URL."""
    counting = CountingUpstream()
    async with serving_app(counting.app()) as origin:
        yield counting, origin
        counting.release.set()


@pytest.fixture
def refused_port() -> Iterator[Port]:
    """A loopback port this test holds and nothing listens on: a connection is refused."""
    with Port() as port:
        yield port


@pytest.fixture
def held_port() -> Iterator[Port]:
    """A loopback port this test holds, for a server it starts that binds it by itself
    (beside the hold: `testkit.ports`)."""
    with Port() as port:
        yield port


@pytest.fixture
def record_format() -> int:
    """The format `make_gateway`'s gateways write when a test gives no settings: format 1
    (a module overrides this fixture to run its tests in both)."""
    return 1


@pytest.fixture
async def make_gateway(
    redis_url: str, upstream: tuple[CountingUpstream, str], tmp_path: Path, record_format: int
) -> AsyncIterator[GatewayFactory]:
    """Start in-process gateways in front of the counting upstream (blobs in tmp_path)."""
    clients: list[TestClient] = []

    async def factory(
        settings: Settings | None = None,
        url: str | None = None,
        blob: dict[str, Any] | None = None,
        redis: dict[str, Any] | None = None,
        **route: Any,
    ) -> TestClient:
        blob = blob or {"url": f"file://{tmp_path}/blobs"}
        written = {"record_format": record_format, **(redis or {})}
        app: web.Application = create_app(
            settings or gateway_settings(upstream[1], redis=written, blob=blob, **route),
            url or redis_url,
            Metrics(),
        )
        client = TestClient(GatewayServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture
async def make_admin() -> AsyncIterator[AdminFactory]:
    """The admin listener of an in-process gateway: `await make_admin(gateway_client)`."""
    clients: list[TestClient] = []

    async def factory(
        gateway: TestClient, token: str | None = ADMIN_TOKEN, state: AdminState | None = None
    ) -> TestClient:
        app = create_admin_app(gateway.server.app, token, state or AdminState())
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture(params=["plain", "tls"])
def wire(request: pytest.FixtureRequest, tmp_path: Path) -> Wire:
    """How a raw-socket test's clients reach the gateway: plain TCP, then TLS."""
    return PLAIN if request.param == "plain" else tls_wire(tmp_path / "wire-ca")


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One S3-compatible server (moto) for the session, enforcing SigV4 signatures."""
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture(params=["file", "s3"])
def stored_blobs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoredBlobs]:
    """A blob store for the gateway, once as a directory and once as an S3 bucket; its
    `config` is the gateway's `blob:` section."""
    if request.param == "file":
        blobs: StoredBlobs = FileBlobs(tmp_path / "blob-store")
    else:
        blobs = S3Blobs(request.getfixturevalue("moto_server"))
    yield blobs
    blobs.close()


@pytest.fixture
def full_disk() -> Iterator[Path]:
    """A 1 MiB tmpfs, filled to its last byte once the test says so (`fill`)."""
    mount = Path(tempfile.mkdtemp(prefix="idem-full-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        mount.rmdir()
        pytest.skip(f"a full disk needs a tmpfs, which cannot be mounted here: {mounted.stderr}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        mount.rmdir()
