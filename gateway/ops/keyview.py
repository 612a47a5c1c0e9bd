"""One record as the console shows it: state, status line, headers, a capped preview of the
body (text when it is UTF-8 text, hex otherwise) and its times. Tenant values and the raw key
are hashed as the gateway hashes them and never leave this function."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Final

from gateway.blobs.base import BlobStore
from gateway.config.policy import Route
from gateway.errors import BlobError
from gateway.ops.keyops import Names, describe
from gateway.store.store import Store

PREVIEW_MAX: Final = 4096  # body bytes a lookup shows


def preview(body: bytes) -> dict[str, Any]:
    """The first PREVIEW_MAX bytes as text when they are UTF-8 text, else as hex."""
    head = body[:PREVIEW_MAX]
    truncated = len(body) > PREVIEW_MAX
    text = _utf8(head, truncated)
    if text is None or any(ord(c) < 0x20 and c not in "\t\r\n" for c in text):
        return {"kind": "hex", "hex": head.hex(" "), "truncated": truncated}
    return {"kind": "text", "text": text, "truncated": truncated}


def _utf8(head: bytes, truncated: bool) -> str | None:
    """`head` as UTF-8 text; a character the cap cut in two is left out."""
    for cut in range(4 if truncated else 1):
        try:
            return head[: len(head) - cut].decode()
        except UnicodeDecodeError:
            continue
    return None


async def detail(store: Store, blobs: BlobStore, route: Route, names: Names) -> dict[str, Any]:
    """What the console shows of the record under `names` (absent: state absent only); its
    `record` is the name that holds it."""
    stored = await store.inspect(*names)
    out = describe(stored)
    if out["state"] == "absent":
        return out
    out["record"] = stored.key  # a corrupt one's too: the name to settle it by
    if out["state"] == "corrupt":
        return out
    now = time.time()
    if b"c" in stored.fields:
        out["created_at"] = int(stored.fields[b"c"]) / 1000
    if stored.pttl_ms >= 0:
        out["expires_at"] = round(now + stored.pttl_ms / 1000, 3)
    record = stored.record
    if record is None:  # pending or owner-lost, no answer yet: the lease says the rest
        age = out.get("age_seconds")
        out["lease_seconds"] = route.lease
        out["lease_overdue"] = age is not None and age > route.lease
        return out
    out["reason"] = record.reason
    out["stored_at"] = record.completed_at
    out["headers"] = [[name, value] for name, value in record.headers]
    if record.blob is None:
        out["body"] = preview(stored.body)
    else:
        out["body"] = await _blob_preview(blobs, record.blob)
    return out


async def _blob_preview(blobs: BlobStore, name: str) -> dict[str, Any]:
    try:
        reader = await blobs.reader(name)
    except BlobError:
        return {"kind": "missing", "truncated": False}
    head = b""
    try:
        async for chunk in reader.chunks():
            head += chunk
            if len(head) > PREVIEW_MAX:
                break
    except BlobError:
        return {"kind": "missing", "truncated": False}
    finally:
        with contextlib.suppress(BlobError):
            await reader.close()
    return preview(head[: PREVIEW_MAX + 1])
