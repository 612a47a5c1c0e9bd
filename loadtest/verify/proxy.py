"""A TCP fault proxy for loopback links (gateway to Redis, gateway to upstream).

    python -m loadtest.verify.proxy --listen P --target PORT --control C

It passes bytes both ways until told otherwise by `POST http://127.0.0.1:C/mode?m=MODE`:
- `pass`: forward as they come;
- `blackhole`: pass nothing either way on the open connections and on new ones, and leave
  them open, as a dead link does; when the link heals they are reset (a real TCP stream
  never loses bytes and goes on: its retransmissions time out and it dies);
- `reset`: abort every open connection with a TCP RST and every new one as it comes;
- `latency&ms=N`: hold each chunk N ms before passing it on;
- `hold`: pass what the client sends, and keep back what the target answers until told
  `release` (what was kept back goes out, and what comes after is kept back),
  `release&share=F` (on each connection, the first F of the whole Redis replies kept
  back goes out, rounded down) or another mode (what was kept back goes out first).

With `stop=P`, a `release` waits (briefly) for process P to sleep in `epoll_wait`, then
SIGSTOPs it the moment the replies let go are written: a gateway waiting on them is stopped
with them handed over, and takes them in as it wakes, before its timers fire (`idle`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from aiohttp import web

from loadtest.procs import run_server

CHUNK = 1 << 16
# How long a `stop` waits for its process to go idle (a fifth of the gateways' socket
# timeout, as the nemesis's holds: no call it has out times out meanwhile).
IDLE_WITHIN = 0.1


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self.latency = 0.0
        self.open: set[asyncio.StreamWriter] = set()
        self.doomed: set[asyncio.StreamWriter] = set()  # held by a black hole
        self.kept: list[tuple[asyncio.StreamWriter, bytes]] = []  # answers held back, in order

    def set_mode(
        self, mode: str, latency_ms: float = 0.0, share: float = 1.0, stop: int = 0
    ) -> None:
        if stop:
            idle(stop, IDLE_WITHIN)
        with apart(stop):
            if mode == "release" and share < 1:
                self.let_go_replies(share)
            else:
                self.let_go_all()
            if stop:
                os.kill(stop, signal.SIGSTOP)
        if mode == "release":
            mode = "hold"
        self.mode, self.latency = mode, latency_ms / 1000
        if mode == "blackhole":
            self.doomed.update(self.open)
        else:
            for writer in list(self.doomed if mode != "reset" else self.open):
                abort(writer)
            self.doomed.clear()

    def let_go_all(self) -> None:
        """Write what was kept back, in the order it came (before anything after it)."""
        kept, self.kept = self.kept, []
        for writer, chunk in kept:
            if not writer.is_closing():
                writer.write(chunk)

    def let_go_replies(self, share: float) -> None:
        """Write, on each connection, the first `share` of the whole Redis replies kept
        back (rounded down); keep the rest."""
        held: dict[asyncio.StreamWriter, bytes] = {}
        for writer, chunk in self.kept:
            held[writer] = held.get(writer, b"") + chunk
        self.kept = []
        for writer, data in held.items():
            ends = reply_ends(data)
            count = int(len(ends) * share)
            cut = ends[count - 1] if count else 0
            if cut and not writer.is_closing():
                writer.write(data[:cut])
            if data[cut:]:
                self.kept.append((writer, data[cut:]))

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.mode == "reset":
            abort(client_w)
            return
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            abort(client_w)
            return
        self.open.update((client_w, server_w))
        if self.mode == "blackhole":
            self.doomed.update((client_w, server_w))
        try:
            await asyncio.gather(
                self.pipe(client_r, server_w, client_w),
                self.pipe(server_r, client_w, server_w, answers=True),
            )
        finally:
            for writer in (client_w, server_w):
                self.open.discard(writer)
                self.doomed.discard(writer)
                writer.close()

    async def pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        other: asyncio.StreamWriter,
        answers: bool = False,
    ) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                if writer in self.doomed:
                    continue  # swallowed; the connection is reset when the link heals
                if self.mode == "latency" and self.latency:
                    await asyncio.sleep(self.latency)
                if answers and self.mode == "hold":
                    self.kept.append((writer, chunk))
                    continue
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if self.mode == "reset":
                abort(writer)
                abort(other)
            else:
                writer.close()


def reply_ends(data: bytes) -> list[int]:
    """The offset just past each whole RESP2 reply in `data` (a Redis connection's answers,
    in order), up to the first one cut short."""
    ends: list[int] = []
    at: int | None = 0
    while at is not None and at < len(data):
        at = _past(data, at)
        if at is not None:
            ends.append(at)
    return ends


def _past(data: bytes, at: int) -> int | None:
    """The offset just past the RESP2 value that begins at `at`; None if it is not whole."""
    line = data.find(b"\r\n", at)
    if line < 0:
        return None
    kind, head, after = data[at : at + 1], data[at + 1 : line], line + 2
    if kind == b"$":
        size = int(head)
        end = after + size + 2 if size >= 0 else after
        return end if end <= len(data) else None
    if kind == b"*":
        for _ in range(max(0, int(head))):
            if (next_at := _past(data, after)) is None:
                return None
            after = next_at
    return after  # a status, an error, an integer: one line


def idle(pid: int, within: float) -> None:
    """Return once process `pid` sleeps in `epoll_wait` (its loop has run what it had, its
    timers and its callbacks), or `within` seconds have passed. Answers written to it then
    are handed over by that very `epoll_wait`, which a SIGSTOP sent next does not interrupt
    (there are events to return): woken, it reads them before its timers fire. Busy when
    they came, it would finish its work first, and its timers, overdue after a stop, would
    fire first."""
    deadline = time.monotonic() + within
    wchan = Path(f"/proc/{pid}/wchan")
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):  # it may have gone
            if "epoll" in wchan.read_text():
                return


@contextlib.contextmanager
def apart(pid: int) -> Iterator[None]:
    """This thread and process `pid` on two different cores for the block (where there are
    two): woken by what this thread writes, `pid` cannot run in its stead on its core, and
    be at the end of its work when the SIGSTOP this thread sends next comes."""
    if not pid:
        yield
        return
    mine, theirs = os.sched_getaffinity(0), os.sched_getaffinity(pid)
    cores = sorted(mine & theirs)
    if len(cores) > 1:
        os.sched_setaffinity(0, {cores[0]})
        os.sched_setaffinity(pid, {cores[1]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
        with contextlib.suppress(OSError):  # it may have gone meanwhile
            os.sched_setaffinity(pid, theirs)


def abort(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (linger 0) rather than a FIN."""
    if writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):  # it may have closed meanwhile
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def serve(listen: int, target: int, control: int) -> None:
    proxy = FaultProxy(target)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", listen, backlog=4096)

    async def set_mode(request: web.Request) -> web.Response:
        query = request.query
        proxy.set_mode(
            query.get("m", "pass"), float(query.get("ms", "0")), float(query.get("share", "1")),
            int(query.get("stop", "0")),
        )  # fmt: skip
        return web.Response(text=proxy.mode)

    app = web.Application()
    app.router.add_post("/mode", set_mode)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", control).start()
    try:
        await server.serve_forever()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--target", type=int, required=True, help="the port on 127.0.0.1")
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    run_server(args.loop, serve(args.listen, args.target, args.control))


if __name__ == "__main__":
    main()
