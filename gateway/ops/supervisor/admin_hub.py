"""The one admin address of a `--workers N` gateway, served by its supervisor.

Each worker serves its admin application on a unix socket of its own in a private folder;
the supervisor listens on `admin.port`, in a thread of its own with an event loop, and asks
its workers: `/healthz` and `/readyz` answer for all of them, `/metrics` merges theirs
(`merged_metrics`: a `worker` label, counters carried over a worker's restart), the console's
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
from typing import Final

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway import build
from gateway.config.settings import Admin, Limits
from gateway.http.server.certificates import Certificates
from gateway.ops.admin_limits import guarded_app, serve
from gateway.ops.console import add_pages
from gateway.ops.history import HISTORY, History, history_page, keep
from gateway.ops.overview import overview
from gateway.ops.supervisor.merged_metrics import one_each
from gateway.ops.supervisor.relay import attention, forward
from gateway.ops.supervisor.worker_admins import WORKERS, WorkerSet

log = logging.getLogger("gateway.ops.supervisor.admin_hub")

# How often the supervisor reads its workers' metrics even when nobody scrapes: what a
# worker that dies counted since is lost, so this bounds the loss.
REFRESH: Final = 1.0
# The most workers one gateway runs (--workers), all asked by its one admin listener.
MAX_WORKERS: Final = 64


class Hub:
    """The supervisor's admin listener; `started` and `exited` are called from the
    supervisor's thread as it starts and reaps workers."""

    def __init__(self, settings: Admin, limits: Limits, count: int, state_dir: str) -> None:
        self.settings = settings
        self.limits = limits  # the public listener's, which the admin listener keeps to
        self.count = count
        # admin.tls: the supervisor's listener is the one that shows the certificate.
        self.tls = Certificates("admin", settings.tls) if settings.tls is not None else None
        self.set = WorkerSet(count, state_dir, self.tls)
        self.history = History()  # the console's last minutes, of every worker
        self.loop = asyncio.new_event_loop()
        build.contain_compiled_tasks(self.loop)
        self._admin_thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._served = threading.Event()
        self._failure: BaseException | None = None

    def channel(self, slot: int) -> str:
        return self.set.channel(slot)

    def started(self, slot: int, pid: int) -> None:
        self.loop.call_soon_threadsafe(self.set.started, slot, pid)

    def exited(self, slot: int) -> None:
        self.loop.call_soon_threadsafe(self.set.exited, slot)

    def failed_start(self) -> None:
        self.loop.call_soon_threadsafe(self.set.failed_start)

    def stopping(self) -> None:
        self.set.draining = True  # a plain flag: /readyz answers 503 from now on

    def reload(self) -> None:
        """SIGHUP: load admin.tls's files again (the workers reload their own config)."""
        if self.tls is not None:
            self.loop.call_soon_threadsafe(self.tls.reload)

    def start(self, sock: socket.socket) -> None:
        """Serve on the bound socket `sock` in a thread of its own; back once it serves."""
        self._admin_thread = threading.Thread(
            target=self._run, args=(sock,), name="admin", daemon=True
        )
        self._admin_thread.start()
        self._served.wait()
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        thread = self._admin_thread
        if thread is not None and thread.is_alive() and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            thread.join(timeout=10)
        if thread is None or not thread.is_alive():
            self.loop.close()  # its thread's runner closed it, unless it never ran
        shutil.rmtree(self.set.folder, ignore_errors=True)

    def _run(self, sock: socket.socket) -> None:
        # asyncio's runner cancels what is left before it closes the loop: a client that
        # hung up mid-request leaves aiohttp's task for it, which the runner's cleanup no
        # longer reaches ("Task was destroyed but it is pending!" as the supervisor stops).
        asyncio.set_event_loop(self.loop)
        with asyncio.Runner(loop_factory=lambda: self.loop) as runner:
            runner.run(self._serve(sock))

    async def _serve(self, sock: socket.socket) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(self.app(), access_log=None)
        try:
            await runner.setup()
            context = self.tls.context if self.tls is not None else None
            await serve(runner, sock, context)
        except BaseException as exc:  # told to the supervisor's thread, which says it
            self._failure = exc
            self._served.set()
            await runner.cleanup()
            return
        host, port = sock.getsockname()[:2]
        scheme = "http" if self.tls is None else "https"
        log.info("admin listener on %s://%s:%d for %d workers", scheme, host, port, self.count)
        self._served.set()
        history = keep(self.history, self.set.metrics.families)
        tasks = [asyncio.create_task(self._refreshing()), asyncio.create_task(history)]
        if self.tls is not None:
            tasks.append(asyncio.create_task(self.tls.watch_expiry()))
        if self.tls is not None and self.tls.settings.watch_interval is not None:
            tasks.append(asyncio.create_task(self.tls.watch(self.tls.settings.watch_interval)))
        try:
            await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await runner.cleanup()
            await self.set.close()

    def app(self) -> web.Application:
        app = guarded_app(self.limits)
        app[WORKERS] = self.set
        app[HISTORY] = self.history
        app.router.add_get("/healthz", _healthz)
        app.router.add_get("/readyz", _readyz)
        app.router.add_get("/metrics", _metrics)
        app.router.add_get("/console/api/overview", _overview)
        app.router.add_get("/console/api/attention", attention)
        app.router.add_get("/console/api/history", history_page)
        app.router.add_post("/keys/{op}", forward)
        app.router.add_route("*", "/console/api/{name}", forward)
        add_pages(app)
        return app

    async def _refreshing(self) -> None:
        while True:
            try:
                await self.set.refresh()
            except Exception:  # a worker's answer it cannot read: the next round asks again
                log.exception("reading the workers' metrics failed")
            await asyncio.sleep(REFRESH)


def supervisor_families(
    count: int, up: int, restarts: int, failed: int = 0, admin_expires: float | None = None
) -> list[Metric]:
    """The supervisor's own series: workers configured and answering, restarts, failed
    starts, and the expiry of the admin listener's certificate (admin.tls), which it shows."""
    families: list[Metric] = [
        GaugeMetricFamily("idem_workers", "Worker processes configured", count),
        GaugeMetricFamily("idem_workers_up", "Worker processes answering", up),
        CounterMetricFamily(
            "idem_worker_restarts", "Workers started again after one exited", restarts
        ),
        CounterMetricFamily(
            "idem_worker_failed_starts",
            "Workers that exited during their start (tried again, with a growing pause)",
            failed,
        ),
    ]
    if admin_expires is not None:
        expiry = GaugeMetricFamily(
            "idem_listener_certificate_expiry_timestamp_seconds",
            "When the certificate a TLS listener shows new connections expires (Unix time)",
            labels=["listener"],
        )
        expiry.add_metric(["admin"], admin_expires)
        families.append(expiry)
    return families


class _Exposition(Collector):
    """The workers' families merged and the supervisor's own, each family said once."""

    def __init__(self, hub: WorkerSet, up: int) -> None:
        self.hub, self.up = hub, up

    def collect(self) -> Iterator[Metric]:
        hub = self.hub
        expires = hub.tls.expires if hub.tls is not None else None
        own = supervisor_families(hub.count, self.up, hub.restarts, hub.failed_starts, expires)
        yield from one_each(hub.metrics.families(), own)


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
    up = sum(1 for w in await hub.states("/healthz") if w["up"])
    registry.register(_Exposition(hub, up))
    return web.Response(
        body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _overview(request: web.Request) -> web.Response:
    hub = request.app[WORKERS]
    workers = await hub.states("/readyz")
    await hub.refresh()
    document = overview(hub.metrics.families(), workers)
    return web.json_response(document, dumps=_dumps)


def _dumps(value: object) -> str:
    return orjson.dumps(value).decode()
