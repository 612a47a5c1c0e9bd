"""Recording an upstream body while it streams to the client."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RecordedBody:
    size: int
    sha256: str
    inline: bytes  # the body itself when it is kept in Redis, else b""
    blob: str | None = None  # the blob-store pointer when it is not
    too_large: bool = False  # over max_recorded_body: the body was not kept


class BodyRecorder:
    """Hashes and keeps a body chunk by chunk, up to `max_recorded` bytes."""

    def __init__(self, inline_max: int, max_recorded: int) -> None:
        self._inline_max = inline_max
        self._max_recorded = max_recorded
        self._hash = hashlib.sha256()
        self._chunks: list[bytes] = []
        self._size = 0

    async def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        self._hash.update(chunk)
        if self._size <= self._max_recorded:
            self._chunks.append(chunk)
        else:
            self._chunks.clear()

    async def finish(self) -> RecordedBody:
        digest = self._hash.hexdigest()
        if self._size > self._max_recorded:
            return RecordedBody(self._size, digest, b"", too_large=True)
        return RecordedBody(self._size, digest, b"".join(self._chunks))

    async def discard(self) -> None:
        self._chunks.clear()
