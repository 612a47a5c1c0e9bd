"""The blob store: where response bodies over `inline_max` are kept, behind one interface.

A body is written through a `BlobWriter` under a fresh unique name and becomes visible only
on `commit`, which returns that name (the record's pointer); `abort` leaves nothing behind.
Readers report the stored size before the first byte is read, so a short blob is refused
before a replay sends its head.
"""

from __future__ import annotations

import logging
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator

from gateway.errors import BlobError

log = logging.getLogger(__name__)

# Blob names are ours: 32 hex digits. A pointer read back from Redis must look like one,
# so a tampered record cannot name a path or key outside the store.
_NAME = re.compile(r"^[0-9a-f]{32}$")
READ_CHUNK = 1 << 20


def new_name() -> str:
    return secrets.token_hex(16)


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise BlobError(BlobError.MISSING, f"{name!r} is not a blob name")
    return name


class BlobWriter(ABC):
    """One body being written; nothing is visible under its name until `commit`."""

    @abstractmethod
    async def write(self, chunk: bytes) -> None: ...

    @abstractmethod
    async def commit(self) -> str:
        """Make the blob durable and visible; its name."""

    @abstractmethod
    async def abort(self) -> None:
        """Drop what was written; safe to call more than once and after a failure."""


class BlobReader(ABC):
    """A stored blob opened for reading; `size` is known before reading."""

    size: int

    @abstractmethod
    def chunks(self) -> AsyncIterator[bytes]: ...

    @abstractmethod
    async def close(self) -> None: ...


class BlobStore(ABC):
    """Writes, reads and deletes blobs. Backend failures are raised as BlobError."""

    @abstractmethod
    async def start(self) -> None:
        """Check the store is usable (directory writable, bucket present); ConfigError if not."""

    @abstractmethod
    async def writer(self) -> BlobWriter: ...

    @abstractmethod
    async def reader(self, name: str) -> BlobReader:
        """Open a blob; BlobError(MISSING) when there is none by that name."""

    @abstractmethod
    async def delete(self, name: str) -> None: ...

    async def renew(self, name: str) -> None:
        """The blob's record was stored only now (Redis took it late): count its age for the
        sweep from now, as the record's retention is. Stores whose backend expires objects
        itself keep a day's margin for this (docs/operations.md) and do nothing."""
        return None

    async def sweep(self, max_age: float) -> int:
        """Remove blobs and unfinished writes older than `max_age` seconds; how many.

        Stores whose backend expires objects itself (an S3 lifecycle rule) do nothing.
        """
        return 0

    async def close(self) -> None:
        return None
