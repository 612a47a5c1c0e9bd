"""The one admin address of a `--workers N` gateway, served by its supervisor.

Each worker serves its admin application on a unix socket of its own in a private folder;
the supervisor listens on `admin.port`, in a thread of its own with an event loop, and asks
its workers: `/healthz` and `/readyz` answer for all of them, `/metrics` merges theirs
(`ops.merge`: a `worker` label, counters carried over a worker's restart), the console's
overview adds them up, and key operations go to any live worker (they all share Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import threading
from collections.abc import Iterator

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.config.settings import Admin
from gateway.http.problems import problem
from gateway.ops.console import add_pages
from gateway.ops.keyroutes import FORWARDED_FOR
from gateway.ops.overview import overview
from gateway.ops.workerset import Worker, WorkerSet

log = logging.getLogger("gateway.ops.hub")

# How often the supervisor reads its workers' metrics even when nobody scrapes: what a
# worker that dies counted since is lost, so this bounds the loss.
REFRESH = 1.0
# How long a key operation (Redis, a blob) forwarded to a worker may take.
FORWARD_TIMEOUT = 30.0


class Hub:
    """The supervisor's admin listener; `started` and `exited` are called from the
    supervisor's thread as it starts and reaps workers."""

    def __init__(self, settings: Admin, count: int, state_dir: str) -> None:
        self.settings = settings
        self.count = count
        self.set = WorkerSet(count, state_dir)
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._served = threading.Event()
        self._failure: BaseException | None = None

    def channel(self, slot: int) -> str:
        return self.set.channel(slot)

    def started(self, slot: int, pid: int) -> None:
        self.loop.call_soon_threadsafe(self.set.started, slot, pid)

    def exited(self, slot: int) -> None:
        self.loop.call_soon_threadsafe(self.set.exited, slot)

    def stopping(self) -> None:
        self.set.draining = True  # a plain flag: /readyz answers 503 from now on

    def start(self, sock: socket.socket) -> None:
        """Serve on the bound socket `sock` in a thread of its own; back once it serves."""
        self._thread = threading.Thread(target=self._run, args=(sock,), name="admin", daemon=True)
        self._thread.start()
        self._served.wait()
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive() and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
        shutil.rmtree(self.set.folder, ignore_errors=True)

    def _run(self, sock: socket.socket) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve(sock))
        finally:
            self.loop.close()

    async def _serve(self, sock: socket.socket) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(self.app(), access_log=None)
        try:
            await runner.setup()
            await web.SockSite(runner, sock).start()
        except BaseException as exc:  # told to the supervisor's thread, which says it
            self._failure = exc
            self._served.set()
            await runner.cleanup()
            return
        host, port = sock.getsockname()[:2]
        log.info("admin listener on http://%s:%d for %d workers", host, port, self.count)
        self._served.set()
        refresher = asyncio.create_task(self._refreshing())
        try:
            await self._stop.wait()
        finally:
            refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await refresher
            await runner.cleanup()
            await self.set.close()

    def app(self) -> web.Application:
        app = web.Application()
        app[WORKERS] = self.set
        app.router.add_get("/healthz", _healthz)
        app.router.add_get("/readyz", _readyz)
        app.router.add_get("/metrics", _metrics)
        app.router.add_get("/console/api/overview", _overview)
        app.router.add_get("/console/api/attention", _attention)
        app.router.add_post("/keys/{op}", _forward)
        app.router.add_route("*", "/console/api/{name}", _forward)
        add_pages(app)
        return app

    async def _refreshing(self) -> None:
        while True:
            try:
                await self.set.refresh()
            except Exception:  # a worker's answer it cannot read: the next round asks again
                log.exception("reading the workers' metrics failed")
            await asyncio.sleep(REFRESH)


WORKERS = web.AppKey("workers", WorkerSet)


def supervisor_families(count: int, up: int, restarts: int) -> list[Metric]:
    """The supervisor's own series: workers configured and answering, restarts."""
    return [
        GaugeMetricFamily("idem_workers", "Worker processes configured", count),
        GaugeMetricFamily("idem_workers_up", "Worker processes answering", up),
        CounterMetricFamily(
            "idem_worker_restarts", "Workers started again after one exited", restarts
        ),
    ]


class _Supervisor(Collector):
    def __init__(self, hub: WorkerSet, up: int) -> None:
        self.hub, self.up = hub, up

    def collect(self) -> Iterator[Metric]:
        yield from supervisor_families(self.hub.count, self.up, self.hub.restarts)


class _Merged(Collector):
    def __init__(self, hub: WorkerSet) -> None:
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        yield from self.hub.metrics.families()


async def _healthz(request: web.Request) -> web.Response:
    hub = request.app[WORKERS]
    workers = await hub.states("/healthz")
    healthy = all(w["up"] for w in workers)
    body = {"status": "ok" if healthy else "degraded", "workers": workers}
    return web.json_response(body, status=200 if healthy else 503)


async def _readyz(request: web.Request) -> web.Response:
    hub = request.app[WORKERS]
    workers = await hub.states("/readyz")
    up = [w for w in workers if w["up"]]
    ready = len(up) == hub.count and all(w.get("ready") for w in up) and not hub.draining
    risks = [w.get("eviction_risk") for w in up if w.get("eviction_risk")]
    body = {
        "ready": ready,
        "redis": bool(up) and all(w.get("redis") for w in up),
        "draining": hub.draining or any(w.get("draining") for w in up),
        "eviction_risk": risks[0] if risks else None,
        "workers": workers,
    }
    return web.json_response(body, status=200 if ready else 503)


async def _metrics(request: web.Request) -> web.Response:
    hub = request.app[WORKERS]
    await hub.refresh()
    registry = CollectorRegistry()
    registry.register(_Merged(hub))
    up = sum(1 for w in await hub.states("/healthz") if w["up"])
    registry.register(_Supervisor(hub, up))
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _overview(request: web.Request) -> web.Response:
    hub = request.app[WORKERS]
    workers = await hub.states("/readyz")
    await hub.refresh()
    document = overview(hub.metrics.families(), workers)
    return web.json_response(document, dumps=_dumps)


async def _forward(request: web.Request) -> web.Response:
    """A key operation or lookup, answered by the first live worker (they share Redis)."""
    hub = request.app[WORKERS]
    body = await request.read()
    for worker in sorted(hub.workers.values(), key=lambda w: w.slot):
        answer = await _pass(request, worker, body)
        if answer is not None:
            return answer
    return _no_worker()


async def _attention(request: web.Request) -> web.Response:
    """Every worker's attention list in one: each knows its own calls and journal, and all
    read the same index in Redis (those entries are listed once)."""
    hub = request.app[WORKERS]
    workers = sorted(hub.workers.values(), key=lambda w: w.slot)
    answers = [a for a in await asyncio.gather(*(_pass(request, w, b"") for w in workers)) if a]
    if not answers:
        return _no_worker()
    refused = next((a for a in answers if a.status != 200), None)
    if refused is not None:
        return refused
    items: dict[tuple[str, str], dict[str, object]] = {}
    for answer in answers:
        assert answer.body is not None and isinstance(answer.body, bytes)
        for item in orjson.loads(answer.body)["items"]:
            items.setdefault((item["record"], item["why"]), item)
    return web.json_response({"items": list(items.values())}, dumps=_dumps)


async def _pass(request: web.Request, worker: Worker, body: bytes) -> web.Response | None:
    """`request` as `worker` answers it; None when it does not (it is going away)."""
    headers = {FORWARDED_FOR: request.remote or ""}
    for name in ("Authorization", "Content-Type"):
        if name in request.headers:
            headers[name] = request.headers[name]
    timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT)
    try:
        async with worker.client().request(
            request.method, f"http://worker{request.path}", data=body, headers=headers,
            timeout=timeout,
        ) as resp:  # fmt: skip
            answer = await resp.read()
            kept = {
                name: resp.headers[name]
                for name in ("Content-Type", "WWW-Authenticate")
                if name in resp.headers
            }
            return web.Response(status=resp.status, body=answer, headers=kept)
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None


def _no_worker() -> web.Response:
    return problem(
        503,
        "workers-unavailable",
        "No worker answers",
        "no worker of this gateway answers now; try again",
        {"Retry-After": "1"},
    )


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()
