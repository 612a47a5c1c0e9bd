"""Recording an upstream body while it streams to the client, in constant memory.

Up to `inline_max` bytes are kept in memory for the Redis record; past that, everything goes
to a blob-store writer as it arrives. Past `max_recorded_body` the body is no longer kept
(it still reaches the client) and the record says so.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from gateway.blobs.base import BlobStore, BlobWriter
from gateway.errors import BlobError

log = logging.getLogger(__name__)

# Why a body was not recorded, as kept in the record's extra["body"].
TOO_LARGE = "too-large"  # over max_recorded_body
BLOB_FAILED = "blob-failed"  # the blob store refused it
OMITTED = "omitted"  # over max_replay_body: replayed with its status and headers only
HEADERS_TOO_LARGE = "headers-too-large"  # the answer's headers are over max_recorded_headers


@dataclass(frozen=True, slots=True)
class RecordedBody:
    size: int
    sha256: str
    inline: bytes  # the body itself when it is kept in Redis, else b""
    blob: str | None = None  # the blob name when it is not
    not_recorded: str | None = None  # TOO_LARGE, BLOB_FAILED, OMITTED, HEADERS_TOO_LARGE
    # A body not recorded, kept in a blob only to feed a client that was behind when it grew
    # past the limit: no record points at it, and it goes once that client has it.
    spill: str | None = None


class BodyRecorder:
    """Hashes a body chunk by chunk and keeps it inline or in a blob.

    Used as `async with`: leaving with an exception aborts an unfinished blob.
    """

    def __init__(
        self,
        blobs: BlobStore,
        inline_max: int,
        max_recorded: int,
        expected: int | None = None,
        omit_over: int | None = None,
        spill_wanted: Callable[[], bool] = lambda: False,
    ) -> None:
        self._blobs = blobs
        self._inline_max = inline_max
        self._max_recorded = max_recorded
        self._hash = hashlib.sha256()
        self._chunks: list[bytes] = []
        self._size = 0
        self._writer: BlobWriter | None = None
        # A Content-Length over the limit: nothing is kept from the first byte.
        self._dropped = TOO_LARGE if expected is not None and expected > max_recorded else None
        # Over max_replay_body (`omit_over`) the body is left out on purpose.
        self._omit_over = omit_over
        if omit_over is not None and expected is not None and expected > omit_over:
            self._dropped = OMITTED
        self.failure: BlobError | None = None  # why the blob store refused the body
        # Asked when the body grows past a limit part way: whether a client still needs the
        # bytes seen so far from the store (it fell behind). Then the body is kept as a
        # spill, `_spilling` says why it is not recorded, and the limit is not asked again.
        self._spill_wanted = spill_wanted
        self._spilling: str | None = None

    async def __aenter__(self) -> BodyRecorder:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            await self.discard()

    @property
    def keeping(self) -> bool:
        """Whether the body is still being kept (not dropped as too large or refused)."""
        return self._dropped is None

    async def feed(self, chunk: bytes) -> None:
        self._size += len(chunk)
        self._hash.update(chunk)
        if self._dropped:
            return
        over = None
        if self._omit_over is not None and self._size > self._omit_over:
            over = OMITTED
        elif self._size > self._max_recorded:
            over = TOO_LARGE
        if over is not None and self._spilling is None:
            if not self._spill_wanted():
                await self._drop(over)
                return
            self._spilling = over
        try:
            if self._writer is not None:
                await self._writer.write(chunk)
                return
            self._chunks.append(chunk)
            if self._size > self._inline_max or self._spilling:
                self._writer = await self._blobs.writer()
                held, self._chunks = self._chunks, []
                for piece in held:
                    await self._writer.write(piece)
        except BlobError as exc:
            self.failure = exc
            await self._drop(BLOB_FAILED)

    async def _drop(self, why: str) -> None:
        self._dropped = why
        await self.discard()

    async def finish(self) -> RecordedBody:
        """What to record: the inline body, the committed blob's name, or why neither."""
        digest = self._hash.hexdigest()
        if self._writer is not None and not self._dropped:
            writer, self._writer = self._writer, None
            try:
                name = await writer.commit()
            except BlobError as exc:
                self.failure = exc
                self._dropped = BLOB_FAILED
            else:
                if self._spilling:
                    return RecordedBody(
                        self._size, digest, b"", not_recorded=self._spilling, spill=name
                    )
                return RecordedBody(self._size, digest, b"", blob=name)
        if self._dropped:
            return RecordedBody(self._size, digest, b"", not_recorded=self._dropped)
        return RecordedBody(self._size, digest, b"".join(self._chunks))

    async def discard(self) -> None:
        self._chunks.clear()
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.abort()
