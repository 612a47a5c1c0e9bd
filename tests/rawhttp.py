"""Raw HTTP/1.1 on loopback for byte-exact tests: an upstream that serves a corpus of answers
written as bytes, clients that send raw bytes and read the answer to the connection's end
(`exchange`) or one answer (`one_answer`), and a minimal parser that keeps every byte of the
head."""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .loopback import loopback_server

CORPUS = Path(__file__).parent / "corpus" / "answers.yaml"
PATTERN = bytes(range(256))


@dataclass(frozen=True)
class Entry:
    """One corpus answer: the bytes the upstream writes for `method /c/<name>`."""

    name: str
    raw: bytes
    method: str = "POST"
    close: bool = False

    @classmethod
    def load(cls, item: Mapping[str, Any]) -> Entry:
        raw = item["raw"].encode("latin-1")
        size = int(item.get("body_bytes", 0))
        raw += (PATTERN * (size // len(PATTERN) + 1))[:size]
        raw += item.get("tail", "").encode("latin-1")
        return cls(item["name"], raw, item.get("method", "POST"), bool(item.get("close")))


def corpus() -> list[Entry]:
    return [Entry.load(item) for item in yaml.safe_load(CORPUS.read_text("utf-8"))]


class CorpusUpstream:
    """Serves each entry's bytes for `/c/<name>` and counts the requests per name."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = {entry.name: entry for entry in entries}
        self.calls: collections.Counter[str] = collections.Counter()
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in lines
                     if line.lower().startswith(b"content-length:")), 0,
                )  # fmt: skip
                await reader.readexactly(length)
                self.heads.append(head)
                name = lines[0].split(b" ")[1].decode().rsplit("/", 1)[-1]
                self.calls[name] += 1
                entry = self.entries[name]
                writer.write(entry.raw)
                await writer.drain()
                if entry.close or b"connection: close" in head.lower():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def corpus_upstream(entries: list[Entry]) -> AsyncIterator[tuple[CorpusUpstream, int]]:
    upstream = CorpusUpstream(entries)
    async with loopback_server(upstream.handle) as server:
        yield upstream, server.sockets[0].getsockname()[1]


async def exchange(
    port: int, data: bytes, *, tls: ssl.SSLContext | None = None, half_close: bool = False
) -> bytes:
    """Send raw bytes on a fresh connection (over TLS with `tls`; with `half_close`, the
    sending side shut after them) and read everything that comes back until the other end
    closes."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    try:
        writer.write(data)
        await writer.drain()
        if half_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
        await writer.wait_closed()


async def one_answer(
    port: int, data: bytes, *, tls: ssl.SSLContext | None = None, timeout: float = 10.0
) -> tuple[int, bytes, bytes]:
    """Send `data` on a fresh connection (over TLS with `tls`) and read one answer: its
    status, its head and its body (Content-Length framed; none after HEAD, 204 or 304)."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, limit=1 << 21, ssl=tls, server_hostname="127.0.0.1" if tls else None
    )
    try:
        writer.write(data)
        async with asyncio.timeout(timeout):
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            if data.startswith(b"HEAD ") or status in (204, 304):
                length = 0
            body = await reader.readexactly(length)
        return status, head, body
    finally:
        writer.close()


def status_of(reply: bytes) -> int:
    """The status code of a raw answer (its first line must be an HTTP/1.x status line)."""
    assert reply[:9] in (b"HTTP/1.1 ", b"HTTP/1.0 "), reply[:200]
    return int(reply[9:12])


@dataclass
class Parsed:
    """An answer as bytes: the status line's version and the rest of it, the header fields
    in order, the body (de-chunked), and what else was seen."""

    version: bytes
    status: bytes  # "201 Order Accepted": the code and the reason phrase, as sent
    headers: list[tuple[bytes, bytes]]
    body: bytes
    framing: str  # "length", "chunked" or "close"
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)
    informational: int = 0  # 1xx answers before this one


def _fields(block: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    for line in block.split(b"\r\n"):
        if line:
            name, _, value = line.partition(b":")
            out.append((name, value.strip(b" \t")))
    return out


def parse(raw: bytes, head_request: bool = False) -> Parsed:
    """The final answer in `raw` (an HTTP/1.1 exchange read to the connection's end)."""
    informational = 0
    while True:
        head, sep, rest = raw.partition(b"\r\n\r\n")
        assert sep, f"no complete head in {raw[:200]!r}"
        status_line, _, block = head.partition(b"\r\n")
        version, _, status = status_line.partition(b" ")
        if not status.startswith(b"1"):
            break
        informational += 1
        raw = rest
    headers = _fields(block)
    names = {name.lower(): value for name, value in headers}
    code = int(status[:3])
    if head_request or code in (204, 304):
        return Parsed(version, status, headers, b"", "length", informational=informational)
    if names.get(b"transfer-encoding", b"").lower().endswith(b"chunked"):
        body, trailers = _dechunk(rest)
        return Parsed(version, status, headers, body, "chunked", trailers, informational)
    if b"content-length" in names:
        size = int(names[b"content-length"])
        assert len(rest) >= size, f"body cut short: {len(rest)} of {size} bytes"
        return Parsed(version, status, headers, rest[:size], "length", [], informational)
    return Parsed(version, status, headers, rest, "close", [], informational)


def _dechunk(data: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = []
    while True:
        line, _, data = data.partition(b"\r\n")
        size = int(line.split(b";")[0], 16)
        if size == 0:
            if data.startswith(b"\r\n"):
                return b"".join(body), []
            trailer_block, sep, _ = data.partition(b"\r\n\r\n")
            trailers = _fields(trailer_block) if sep else []
            return b"".join(body), trailers
        body.append(data[:size])
        assert data[size : size + 2] == b"\r\n", "a chunk without its CRLF"
        data = data[size + 2 :]
