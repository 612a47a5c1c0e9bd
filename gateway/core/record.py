"""A recorded upstream answer, and format 1's encoding of it in Redis (JSON)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Final

import orjson

from gateway.core.headers import unwritable_text

# A record's state, as the scripts write it (a PENDING claim is a hash whose `s` is "P").
STATE_PENDING: Final = "P"
STATE_COMPLETED: Final = "C"
STATE_UNKNOWN: Final = "U"
_FRESH: Final[dict[str, str]] = {}  # `extra` not given: each record gets a dict of its own


@dataclass(frozen=True, slots=True, init=False)
class Record:
    """Status, headers in upstream order (repeats kept) and where the body is.

    Header names, values and the reason phrase hold the upstream's bytes one character per
    byte (Latin-1, as `core.headers.header_text` reads them).

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

    def __init__(
        self,
        status: int,
        headers: list[tuple[str, str]],
        size: int,
        sha256: str,
        blob: str | None = None,
        completed_at: float = 0.0,
        unknown: bool = False,
        extra: dict[str, str] = _FRESH,
        reason: str | None = None,
    ) -> None:
        extra = {} if extra is _FRESH else extra
        # A frozen dataclass's own __init__ sets each field through object.__setattr__:
        # compiled, mypyc makes each such call a plain store into the native class; pure, it
        # costs a replay more than its record's decoding, and the slots' own setters make the
        # same stores for half the cost. Either way the instance stays frozen after.
        if _NATIVE:
            object.__setattr__(self, "status", status)
            object.__setattr__(self, "headers", headers)
            object.__setattr__(self, "size", size)
            object.__setattr__(self, "sha256", sha256)
            object.__setattr__(self, "blob", blob)
            object.__setattr__(self, "completed_at", completed_at)
            object.__setattr__(self, "unknown", unknown)
            object.__setattr__(self, "extra", extra)
            object.__setattr__(self, "reason", reason)
            return
        _status(self, status)
        _headers(self, headers)
        _size(self, size)
        _sha256(self, sha256)
        _blob(self, blob)
        _completed_at(self, completed_at)
        _unknown(self, unknown)
        _extra(self, extra)
        _reason(self, reason)

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
                "hb": 1,  # header text is bytes as Latin-1 (earlier records: UTF-8 text)
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Record:
        raw = orjson.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("the record's metadata is not an object")
        reason = raw.get("r")  # absent in records written before reasons were kept
        if raw.get("hb"):  # header text is bytes as Latin-1 already
            headers = [(name, value) for name, value in raw["h"]]
        else:
            # Earlier records hold header text that was written out as UTF-8: the same
            # bytes, as Latin-1 text, replay as those records always did.
            headers = [(_from_utf8(name), _from_utf8(value)) for name, value in raw["h"]]
            reason = None if reason is None else _from_utf8(reason)
        # Written before such heads were refused: no client could be sent it.
        if unwritable_text(reason or "", headers):
            raise ValueError("a control byte in the recorded head")
        status = raw["st"]
        # A status no HTTP/1.1 status line can carry (a record tampered with, or damaged).
        if type(status) is not int or not 100 <= status <= 599:
            raise ValueError(f"the recorded status {status!r} is not an HTTP status")
        return Record(  # not cls(): compiled, a direct call of the native class
            status=status,
            headers=headers,
            size=raw["n"],
            sha256=raw["d"],
            blob=raw.get("blob"),
            completed_at=raw.get("at", 0.0),
            unknown=raw.get("u", False),
            extra=raw.get("x") or {},
            reason=reason,
        )


def native(cls: type) -> bool:
    """Whether `cls` is a native class of the compiled build (mypyc): its fields are members
    of a C struct, not slots."""
    return "__slots__" not in cls.__dict__


def field_setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The setters of a frozen dataclass's fields, in the order named: the stores its own
    `__init__` makes through `object.__setattr__`, without that call (the descriptors' own:
    a slot's on the pure build, a native attribute's on the compiled one). Every field must
    be named, so that one added to the class is never left unset."""
    declared = {each.name for each in fields(cls)}
    if set(names) != declared:
        raise TypeError(f"{cls.__name__}: set {sorted(declared)}, not {sorted(names)}")
    return tuple(cls.__dict__[name].__set__ for name in names)


_NATIVE: Final = native(Record)
_status, _headers, _size, _sha256, _blob, _completed_at, _unknown, _extra, _reason = field_setters(
    Record,
    "status",
    "headers",
    "size",
    "sha256",
    "blob",
    "completed_at",
    "unknown",
    "extra",
    "reason",
)


def _from_utf8(text: str) -> str:
    return text.encode("utf-8").decode("latin-1")
