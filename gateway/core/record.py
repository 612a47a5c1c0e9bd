"""A recorded upstream answer and its compact encoding in Redis."""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

STATE_COMPLETED = "C"
STATE_UNKNOWN = "U"


@dataclass(frozen=True, slots=True)
class Record:
    """Status, headers in upstream order (repeats kept) and where the body is.

    The body is inline (stored beside the metadata) unless `blob` names a blob-store object;
    `size` and `sha256` describe the body either way, so a replay can verify it.
    """

    status: int
    headers: list[tuple[str, str]]
    size: int
    sha256: str
    blob: str | None = None
    completed_at: float = 0.0
    unknown: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    reason: str | None = None  # the upstream's reason phrase; None: the status's usual one

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "st": self.status,
                "h": self.headers,
                "n": self.size,
                "d": self.sha256,
                "blob": self.blob,
                "at": self.completed_at,
                "u": self.unknown,
                "x": self.extra,
                "r": self.reason,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Record:
        raw = orjson.loads(data)
        return cls(
            status=raw["st"],
            headers=[(name, value) for name, value in raw["h"]],
            size=raw["n"],
            sha256=raw["d"],
            blob=raw.get("blob"),
            completed_at=raw.get("at", 0.0),
            unknown=raw.get("u", False),
            extra=raw.get("x") or {},
            reason=raw.get("r"),  # absent in records written before reasons were kept
        )
