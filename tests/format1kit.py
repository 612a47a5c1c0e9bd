"""Records as release 29f1835 stores them (format 1), made without the gateway code that a new
record format replaces: the metadata JSON by a frozen copy of that release's encoder (and of
the two earlier layouts its decoder still reads), the Redis key by a frozen copy of its
naming, and the hash written by that release's own `claim.lua` and `complete.lua`, kept in
tests/format1/lua/. test_format1_records.py replays them through today's gateway."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Final

import orjson
from redis.asyncio import Redis

from gateway.blobs.base import BlobStore

RELEASE: Final = "29f1835"
SCRIPTS: Final = Path(__file__).resolve().parent / "format1" / "lua"
# The release's default `redis.key_prefix`, which the records' keys begin with.
PREFIX: Final = "idem"


class Layout(Enum):
    """The metadata layouts the release reads; it writes LATIN1 alone."""

    # From 8821d85 (the release's own): header names, values and the reason phrase hold the
    # upstream's bytes one character per byte (Latin-1), marked "hb": 1.
    LATIN1 = "latin-1"
    # 05df056 to 8821d85: the header text and reason as text (the bytes read as UTF-8, else
    # Latin-1), written out as UTF-8; replayed as those UTF-8 bytes. No "hb".
    UTF8 = "utf-8"
    # Before 05df056: as UTF8, and no reason phrase kept ("r" absent): the status's usual one.
    UTF8_NO_REASON = "utf-8-no-reason"


@dataclass(frozen=True)
class Meta:
    """What a record's metadata says of an answer: the fields of the release's `Record`."""

    status: Any  # an int; anything else only in a damaged record
    headers: list[tuple[str, str]]
    size: int
    sha256: str
    blob: str | None = None
    completed_at: float = 1764000000.25
    unknown: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


def encode(meta: Meta, layout: Layout = Layout.LATIN1) -> bytes:
    """The metadata JSON as the release's `Record.encode` writes it (LATIN1), or as the
    earlier releases wrote it: the same keys in the same order, orjson's compact output."""
    document: dict[str, Any] = {
        "st": meta.status,
        "h": [[name, value] for name, value in meta.headers],
        "n": meta.size,
        "d": meta.sha256,
        "blob": meta.blob,
        "at": meta.completed_at,
        "u": meta.unknown,
        "x": meta.extra,
    }
    if layout is not Layout.UTF8_NO_REASON:
        document["r"] = meta.reason
    if layout is Layout.LATIN1:
        document["hb"] = 1
    return orjson.dumps(document)


def digest(*parts: bytes | str) -> str:
    """The release's `core.keys.digest`: 128 bits of SHA-256 over the parts, each after its
    length."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:32]


def tenant(scope_values: list[str | None]) -> str:
    """The release's `core.keys.tenant_id`: the scope values hashed (the anonymous scope, no
    value at all, hashes its empty strings alike)."""
    return digest(*[value or "" for value in scope_values])


def record_key(route: str, tenant_hash: str, key: str, prefix: str = PREFIX) -> str:
    """The release's `core.keys.record_key`: `prefix:{route:tenant:keyhash}`, the braces the
    record's Cluster hash tag."""
    return f"{prefix}:{{{route}:{tenant_hash}:{digest(key)}}}"


class Format1Writer:
    """Stores records in a Redis as the release's `Store` does: its `claim.lua`, then its
    `complete.lua`, each by EVALSHA with the arguments in the order the release sends them."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._sha: dict[str, str] = {}

    async def load(self) -> None:
        for name in ("claim", "complete"):
            text = (SCRIPTS / f"{name}.lua").read_text(encoding="utf-8")
            self._sha[name] = await self.client.script_load(text)

    async def store(
        self,
        rkey: str,
        fingerprint: str,
        meta: bytes,
        body: bytes = b"",
        *,
        unknown: bool = False,
        lease: float = 30.0,
        retention: float = 86400.0,
    ) -> None:
        """Claim `rkey` under `fingerprint` and complete it with `meta` and the inline `body`
        ("" for a blob or no body), state "U" for an UNKNOWN outcome, else "C"; kept for
        `retention` seconds. The route's defaults: a lost owner's key is taken, sends are
        not marked."""
        if not self._sha:
            await self.load()
        token = secrets.token_hex(16)
        now_ms = int(time.time() * 1000)
        # Store.claim: fingerprint, token, lease ms, now ms, hold ms (the retention), on a
        # lost owner "take" (or "hold"), "1" when sends are marked (else "").
        claim = (fingerprint, token, _ms(lease), now_ms, _ms(retention), b"take", b"")
        claimed = await self.client.evalsha(self._sha["claim"], 1, rkey, *claim)
        assert claimed == [b"CLAIMED"], f"{rkey}: claim.lua answered {claimed!r}"
        # Store.complete: token, state, metadata, inline body, retention ms, fingerprint.
        state = b"U" if unknown else b"C"
        complete = (token, state, meta, body, _ms(retention), fingerprint)
        stored = await self.client.evalsha(self._sha["complete"], 1, rkey, *complete)
        assert stored == 1, f"{rkey}: complete.lua answered {stored!r}"


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


async def write_blob(blobs: BlobStore, body: bytes, chunk: int = 1 << 16) -> str:
    """`body` written to the blob store as the recorder writes an answer's (chunk by chunk,
    then committed): the name a record points at."""
    writer = await blobs.writer()
    for start in range(0, len(body), chunk):
        await writer.write(body[start : start + chunk])
    return await writer.commit()
