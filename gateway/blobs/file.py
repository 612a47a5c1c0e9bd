"""`file:///DIR`: blobs as files of one directory, for a gateway on one host.

A blob is written to `NAME.part` and renamed to `NAME` after an fsync, so a crash leaves at
most a `.part` file, which the periodic sweep removes with the expired blobs. File calls run
in worker threads so that a slow disk does not stall the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from gateway.blobs.base import READ_CHUNK, BlobReader, BlobStore, BlobWriter, check_name, new_name
from gateway.errors import BlobError, ConfigError

PART = ".part"
# Writes are gathered into pieces of this size before a thread writes them.
WRITE_BUFFER = 4 << 20


class FileBlobWriter(BlobWriter):
    def __init__(self, directory: Path, name: str, file: BinaryIO) -> None:
        self._final = directory / name
        self._part = directory / (name + PART)
        self._name = name
        self._file: BinaryIO | None = file
        self._buffer: list[bytes] = []
        self._buffered = 0

    async def write(self, chunk: bytes) -> None:
        self._buffer.append(chunk)
        self._buffered += len(chunk)
        if self._buffered >= WRITE_BUFFER:
            await self._flush()

    async def _flush(self) -> None:
        if self._file is None:
            raise BlobError(BlobError.WRITE, "write after commit or abort")
        data = b"".join(self._buffer)
        self._buffer, self._buffered = [], 0
        try:
            await asyncio.to_thread(self._file.write, data)
        except OSError as exc:
            raise BlobError(BlobError.WRITE, f"{self._part}: {exc}") from exc

    async def commit(self) -> str:
        try:
            await self._flush()
        except BlobError:
            await self.abort()  # a full disk must not stay full of it until the sweep
            raise
        file, self._file = self._file, None
        assert file is not None
        try:
            await asyncio.to_thread(self._finish, file)
        except OSError as exc:
            await self.abort()
            raise BlobError(BlobError.WRITE, f"{self._final}: {exc}") from exc
        return self._name

    def _finish(self, file: BinaryIO) -> None:
        with file:
            file.flush()
            os.fsync(file.fileno())
        os.replace(self._part, self._final)
        # The rename itself must survive a crash before the record naming it is stored.
        directory = os.open(self._final.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    async def abort(self) -> None:
        file, self._file = self._file, None
        self._buffer, self._buffered = [], 0
        await asyncio.to_thread(self._remove, file)

    def _remove(self, file: BinaryIO | None) -> None:
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        with contextlib.suppress(FileNotFoundError):
            self._part.unlink()


class FileBlobReader(BlobReader):
    def __init__(self, file: BinaryIO, size: int) -> None:
        self._file = file
        self.size = size

    async def chunks(self) -> AsyncIterator[bytes]:
        while chunk := await asyncio.to_thread(self._file.read, READ_CHUNK):
            yield chunk

    async def close(self) -> None:
        self._file.close()


class FileBlobStore(BlobStore):
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def from_url(cls, url: str) -> FileBlobStore:
        return cls(Path(unquote(urlsplit(url).path)))

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self._probe)
        except OSError as exc:
            raise ConfigError(
                f"blob.url: {self.directory} is not a writable directory: {exc}"
            ) from None

    def _probe(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # a new one is private
        probe = self.directory / (new_name() + PART)
        probe.write_bytes(b"")
        probe.unlink()

    async def writer(self) -> BlobWriter:
        name = new_name()
        part = self.directory / (name + PART)
        try:
            file = await asyncio.to_thread(open, part, "xb")
        except OSError as exc:
            raise BlobError(BlobError.WRITE, f"{part}: {exc}") from exc
        return FileBlobWriter(self.directory, name, file)

    async def reader(self, name: str) -> BlobReader:
        path = self.directory / check_name(name)
        try:
            return await asyncio.to_thread(self._open, path)
        except FileNotFoundError:
            raise BlobError(BlobError.MISSING, f"{path} does not exist") from None
        except OSError as exc:
            raise BlobError(BlobError.MISSING, f"{path}: {exc}") from exc

    @staticmethod
    def _open(path: Path) -> FileBlobReader:
        file = open(path, "rb")  # noqa: SIM115 - the reader closes it
        return FileBlobReader(file, os.fstat(file.fileno()).st_size)

    async def delete(self, name: str) -> None:
        path = self.directory / check_name(name)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(path.unlink)

    async def renew(self, name: str) -> None:
        path = self.directory / check_name(name)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(os.utime, path)

    async def sweep(self, max_age: float) -> int:
        return await asyncio.to_thread(self._sweep, time.time() - max_age)

    def _sweep(self, cutoff: float) -> int:
        removed = 0
        with os.scandir(self.directory) as entries:
            for entry in entries:
                name = entry.name.removesuffix(PART)
                if len(name) != 32 or not entry.is_file():
                    continue
                try:
                    check_name(name)
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
                except (BlobError, FileNotFoundError):
                    continue
        return removed
