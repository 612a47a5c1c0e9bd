"""The workers of a `--workers N` gateway as its supervisor's admin listener sees them:
each one's private admin socket, its latest metrics, and what it answers."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp
import orjson
from aiohttp import web

from gateway.config.state import private_folder
from gateway.http.server.certificates import Certificates
from gateway.ops.supervisor.merged_metrics import WorkerMetrics, parse

# How long a worker may take to answer the supervisor: health, readiness and metrics.
ASK_TIMEOUT: Final = 2.0
# A unix socket's path must fit sun_path (108 bytes on Linux, with its NUL).
MAX_SOCKET_PATH: Final = 100


@dataclass
class Worker:
    slot: int
    pid: int
    channel: str
    session: aiohttp.ClientSession | None = None
    ready: dict[str, Any] = field(default_factory=dict)

    def client(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=self.channel))
        return self.session


class WorkerSet:
    """The live workers by slot; used from the admin listener's event loop only."""

    def __init__(self, count: int, state_dir: str, tls: Certificates | None = None) -> None:
        self.count = count
        self.tls = tls  # admin.tls, shown by the supervisor's listener
        self.folder = private_folder_for_sockets(state_dir)
        self.workers: dict[int, Worker] = {}
        self.metrics = WorkerMetrics()
        self.restarts = 0
        self.failed_starts = 0  # workers that died during their start
        self.draining = False

    def channel(self, slot: int) -> str:
        return str(self.folder / f"w{slot}.sock")

    def started(self, slot: int, pid: int) -> None:
        self.workers[slot] = Worker(slot, pid, self.channel(slot))

    def exited(self, slot: int) -> None:
        worker = self.workers.pop(slot, None)
        self.metrics.retire(slot)
        if worker is not None and not self.draining:
            self.restarts += 1
        if worker is not None and worker.session is not None:
            asyncio.get_running_loop().create_task(worker.session.close())

    def failed_start(self) -> None:
        self.failed_starts += 1

    async def close(self) -> None:
        for worker in self.workers.values():
            if worker.session is not None:
                await worker.session.close()

    async def refresh(self) -> None:
        """Read every worker's metrics now."""
        await asyncio.gather(*[self._read_metrics(w) for w in list(self.workers.values())])

    async def _read_metrics(self, worker: Worker) -> None:
        answer = await self.ask(worker, "/metrics")
        if answer is not None and self.workers.get(worker.slot) is worker:
            self.metrics.update(worker.slot, parse(answer[1].decode()))

    async def ask(self, worker: Worker, path: str) -> tuple[int, bytes] | None:
        """GET `path` of one worker's admin application; None when it does not answer."""
        try:
            timeout = aiohttp.ClientTimeout(total=ASK_TIMEOUT)
            async with worker.client().get(f"http://worker{path}", timeout=timeout) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError):
            return None

    async def states(self, path: str) -> list[dict[str, Any]]:
        """Each worker slot's answer to `path` (health or readiness), down ones included."""

        async def one(slot: int) -> dict[str, Any]:
            worker = self.workers.get(slot)
            answer = await self.ask(worker, path) if worker is not None else None
            state: dict[str, Any] = {"worker": slot, "pid": worker.pid if worker else None}
            if answer is None:
                return {**state, "up": False}
            with contextlib.suppress(ValueError):
                state.update(orjson.loads(answer[1]))
            return {**state, "up": True, "status": answer[0]}

        return list(await asyncio.gather(*[one(slot) for slot in range(self.count)]))


def private_folder_for_sockets(state_dir: str) -> Path:
    """A folder only this user may enter, for the workers' sockets: in the state folder, or
    in the temp folder when that path is too long for a unix socket."""
    base = private_folder(Path(state_dir))
    folder = Path(tempfile.mkdtemp(prefix="admin-", dir=base))
    if len(str(folder / "w64.sock")) > MAX_SOCKET_PATH:
        folder.rmdir()
        folder = Path(tempfile.mkdtemp(prefix="idem-admin-"))
    return folder


WORKERS: Final = web.AppKey("workers", WorkerSet)
