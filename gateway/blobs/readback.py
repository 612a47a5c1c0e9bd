"""A body the recorder kept (`RecordedBody`), read back from its start: for a client that fell
behind while the answer was recorded (`http.flow.feed.Rest`). Its own module because it is made
of async generators, which mypyc does not compile (setup.py): the forwarding that uses it
(`http.flow.forward`) is compiled."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

from gateway.blobs.base import BlobStore
from gateway.blobs.recorder import RecordedBody
from gateway.errors import BlobError

Chunks = Callable[[], AsyncGenerator[bytes, None]]


def read_back(blobs: BlobStore, body: RecordedBody) -> Chunks | None:
    """The body's bytes, from memory or from its blob or spill; None when it was not kept.
    A spill is removed once read (or, if its client went away first, by the sweep)."""
    if body.not_recorded and body.spill is None:
        return None
    name = body.blob or body.spill
    if name is None:
        inline = body.inline

        async def in_memory() -> AsyncGenerator[bytes, None]:
            yield inline

        return in_memory

    async def stored() -> AsyncGenerator[bytes, None]:
        reader = await blobs.reader(name)
        try:
            if reader.size != body.size:
                raise BlobError(BlobError.CORRUPT, f"blob {name} is {reader.size} bytes")
            async for chunk in reader.chunks():
                yield chunk
        finally:
            await reader.close()
            if body.spill is not None:
                await blobs.delete(body.spill)

    return stored
