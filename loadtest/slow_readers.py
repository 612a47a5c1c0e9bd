"""Clients that never read a large answer: how much memory the gateway holds for them and how
soon their keys complete.

    python -m loadtest.slow_readers [--clients 8] [--size-mib 64] [--tree PATH]

Starts a redis-server, an upstream in this process that answers every request with
`--size-mib` MiB, and one gateway process (from `--tree`, default this checkout). `--clients`
raw sockets (4 KiB receive buffers) each send a request with a key of their own and never
read. The script reports the gateway's resident memory before, the most it reached while the
clients stalled (sampled, before any retry), and when each key completed (a retry from
another socket replays the whole body).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import tempfile
import time
from pathlib import Path

import yaml

from testkit.ports import free_port
from testkit.redis_server import RedisServer

from .procs import Child

CHUNK = 1 << 20


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (its peak) of a process, in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0])
    return found


async def upstream(size: int) -> tuple[asyncio.Server, list[int]]:
    calls = [0]
    body = bytes(CHUNK)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                     if line.lower().startswith(b"content-length:")), 0,
                )  # fmt: skip
                await reader.readexactly(length)
                calls[0] += 1
                writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % size)
                for _ in range(size // CHUNK):
                    writer.write(body)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # cancelled: the script is ending
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, calls


def post(key: str) -> bytes:
    return (
        b"POST /pay HTTP/1.1\r\nHost: gw\r\nIdempotency-Key: %s\r\nContent-Length: 2\r\n\r\n{}"
        % (key.encode())
    )


async def retry(port: int, key: str) -> tuple[int, int]:
    """A retry of `key` from a fresh connection: its status and body length."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(post(key))
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n")
             if line.lower().startswith(b"content-length:")), 0,
        )  # fmt: skip
        received = 0
        while received < length:
            received += len(await reader.read(CHUNK))
        return int(head.split(b" ")[1]), received
    finally:
        writer.close()


async def run(clients: int, size: int, tree: str | None, deadline: float) -> None:
    redis = RedisServer()
    redis.start()
    server, calls = await upstream(size)
    origin = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    with tempfile.TemporaryDirectory(prefix="idem-slow-readers-") as work:
        port = free_port()
        config = Path(work) / "gateway.yaml"
        config.write_text(
            yaml.safe_dump({
                "listen": {"host": "127.0.0.1", "port": port},
                "redis": {"url": redis.url},
                "blob": {"url": f"file://{work}/blobs"},
                "log_level": "warning",
                "routes": [{"name": "pay", "path_prefix": "/pay", "upstream": origin}],
            })
        )  # fmt: skip
        env = {"PYTHONPATH": tree} if tree else None
        args = ["--config", str(config), "--workers", "1"]
        gateway = await asyncio.to_thread(
            Child, "gateway", "gateway", port, args, Path(work), env, Path(work)
        )
        pid = gateway.process.pid
        try:
            await retry(port, "warm-up")  # one answer through, read in full
            before = memory(pid)["VmRSS"]
            sockets = []
            started = time.monotonic()
            for n in range(clients):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", port))
                sock.sendall(post(f"stalled-{n}"))
                sockets.append(sock)
            # Memory while they stall, before any retry replays anything.
            stalled = before
            while calls[0] <= clients and time.monotonic() - started < deadline:
                stalled = max(stalled, memory(pid)["VmRSS"])
                await asyncio.sleep(0.05)
            for _ in range(40):
                stalled = max(stalled, memory(pid)["VmRSS"])
                await asyncio.sleep(0.05)
            settled = memory(pid)["VmRSS"]  # recorded, the clients still stalled
            done: dict[int, float] = {}
            while len(done) < clients and time.monotonic() - started < deadline:
                for n in range(clients):
                    if n not in done and calls[0] > n:
                        status, length = await retry(port, f"stalled-{n}")
                        if status == 201 and length == size:
                            done[n] = time.monotonic() - started
                await asyncio.sleep(0.1)
            after = memory(pid)["VmRSS"]
            print(f"clients {clients}, answer {size >> 20} MiB each, tree {tree or '.'}")
            print(
                f"gateway RSS: {before / 1024:.1f} MiB before, at most {stalled / 1024:.1f} MiB "
                f"while they stalled ({(stalled - before) / 1024 / clients:.2f} MiB per client), "
                f"{settled / 1024:.1f} MiB once recorded with the clients still stalled "
                f"({(settled - before) / 1024 / clients:.2f} MiB per client), "
                f"{after / 1024:.1f} MiB after the replays"
            )
            print(f"upstream calls {calls[0] - 1} for {clients} keys")
            if len(done) == clients:
                print(f"keys complete (replayed in full) after {max(done.values()):.2f} s")
            else:
                print(f"{clients - len(done)} keys not complete after {deadline:.0f} s")
            for sock in sockets:
                sock.close()
        finally:
            gateway.stop()
            server.close()
            redis.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--tree", help="another checkout's root, put first on PYTHONPATH")
    parser.add_argument("--deadline", type=float, default=30.0, help="seconds to wait for keys")
    args = parser.parse_args()
    asyncio.run(run(args.clients, args.size_mib << 20, args.tree, args.deadline))


if __name__ == "__main__":
    main()
