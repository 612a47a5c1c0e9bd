"""Opening the configured blob store, and sweeping the blobs that no record points at."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.blobs.base import BlobStore
from gateway.blobs.file import FileBlobStore
from gateway.blobs.s3 import S3BlobStore
from gateway.config.settings import BlobSettings

log = logging.getLogger(__name__)


def open_blob_store(settings: BlobSettings) -> BlobStore:
    """The store `settings.url` names (not started yet)."""
    if settings.url.startswith("s3://"):
        return S3BlobStore(settings)
    return FileBlobStore.from_url(settings.url)


class LongestHold:
    """The longest `current()` has ever been: the sweep's age limit. A reload that shortens
    retention must not sweep the blobs of records still kept under the longer one."""

    def __init__(self, first: float, current: Callable[[], float]) -> None:
        self._current = current
        self._longest = first

    def __call__(self) -> float:
        self._longest = max(self._longest, self._current())
        return self._longest


async def sweep_periodically(
    store: BlobStore, interval: float, max_age: Callable[[], float]
) -> None:
    """Run `store.sweep(max_age())` every `interval` seconds until cancelled (`max_age` is
    asked each time: a reloaded config can keep records longer; see LongestHold)."""
    while True:
        await asyncio.sleep(interval)
        try:
            removed = await store.sweep(max_age())
        except Exception:
            log.exception("blob sweep failed")
            continue
        if removed:
            log.info("blob sweep removed %d stale blobs", removed)
