"""Record format 2: a settled record as one Redis string, its answer packed and compressed.

What the Lua scripts read comes first, uncompressed, each field after its length in one byte;
the answer follows, opaque to them:

    version (2) | state (C or U) | fingerprint | owner token | lost owner's token | answer

The fingerprint is `fingerprint_field` of the request's: the first 128 bits of its SHA-256 as
bytes. The lost owner's token is the one `claim.lua` keeps as `p`: `complete.lua` writes it in
(the gateway that settles a taken-over key does not know it), so the answer that really came
can still replace an unknown outcome recorded meanwhile.

The answer is a codec byte, the packed answer (compressed by zstd with the dictionary the
codec byte names, or raw where compressing would not make it smaller) and a CRC-32 of both,
which `unpack` checks: a damaged or truncated value, an unknown version or dictionary, is a
ValueError, never a wrong answer. The packed answer holds only what cannot be recomputed:

    kind | flags | status (2 bytes) | completed at (ms, 6 bytes) | head | extra | body

each variable part after its length (a LEB128 varint); `kind` says whether the body is
inline (the rest of the packed answer), in the blob store (its name, size and SHA-256), or
not recorded (its size and digest). Names, values and the reason are Latin-1 text, a byte a
character, as `core.record.Record` holds them.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Mapping
from typing import Final

import orjson
import zstandard

from gateway.core.headers import unwritable_text
from gateway.core.record import STATE_COMPLETED, STATE_UNKNOWN, Record

VERSION: Final = 2
RAW: Final = 0  # the codec byte of an answer stored as packed, not compressed
LEVEL: Final = 3  # zstd's default: smaller answers no better at 19, and several times slower

_INLINE: Final = 0
_BLOB: Final = 1
_NOT_KEPT: Final = 2  # no body kept (too large, omitted, or none at all): its size only

_HEX_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_HEX_NAME: Final = re.compile(r"[0-9a-f]{32}")
_AS_BYTES: Final = 0xFF  # a digest field's marker: what follows is the digest's hex as bytes
_REASON: Final = 1  # the flags' bit: the head's first line is the upstream's reason phrase
_STATES: Final = frozenset({STATE_COMPLETED, STATE_UNKNOWN})


def fingerprint_field(fingerprint: str) -> bytes:
    """The fingerprint as a format-2 value holds it: a SHA-256 hex digest's first 128 bits as
    bytes, any other (a route's "-") as its text."""
    if len(fingerprint) == 64:
        try:
            return bytes.fromhex(fingerprint[:32])
        except ValueError:
            pass
    return fingerprint.encode("latin-1")


def _varint(value: int) -> str:
    """`value` (>= 0) as LEB128, a character a byte (the packed text is Latin-1)."""
    if value < 0x80:  # most lengths: one byte, one call
        return chr(value)
    out = []
    while value > 0x7F:
        out.append(chr(0x80 | (value & 0x7F)))
        value >>= 7
    out.append(chr(value))
    return "".join(out)


def _text(value: str) -> str:
    return _varint(len(value)) + value


def _digest(value: str) -> str:
    """A digest or blob name: 64 or 32 lowercase hex characters as bytes, else as text."""
    if (len(value) == 64 and _HEX_DIGEST.fullmatch(value)) or (
        len(value) == 32 and _HEX_NAME.fullmatch(value)
    ):
        return chr(_AS_BYTES) + chr(len(value) // 2) + bytes.fromhex(value).decode("latin-1")
    return _text(value)


def pack_answer(record: Record, body: bytes) -> bytes:
    """The packed answer of `record`, its inline `body` last (a body that is not the
    record's, its size or kind another, is not kept).

    The head is one text: the reason phrase (when the upstream gave one) and each header's
    name and value, each followed by a line feed, which no recorded head holds (an answer
    whose head has a control byte is refused before it is recorded: `core.headers`). The
    time it was stored is in milliseconds, in six bytes."""
    if record.blob is not None:
        kind, where = _BLOB, _digest(record.blob) + _varint(record.size) + _digest(record.sha256)
    elif record.size == len(body) and not record.extra.get("body"):
        kind, where = _INLINE, ""  # its size and digest are the body's own: not stored
    else:
        kind, where = _NOT_KEPT, _varint(record.size) + _digest(record.sha256)
    lines = [value for header in record.headers for value in header]
    flags = 0
    if record.reason is not None:
        lines.insert(0, record.reason)
        flags = _REASON
    head = "\n".join(lines) + "\n" if lines else ""
    extra = orjson.dumps(record.extra).decode() if record.extra else ""
    fixed = _FIXED.pack(kind, flags, record.status, max(0, round(record.completed_at * 1000)))
    text = "".join((_text(head), _text(extra), where)).encode("latin-1")
    return b"".join((fixed[:4], fixed[6:], text, body if kind == _INLINE else b""))


# kind, flags, status, then the time in ms as 8 bytes of which the first 2 are left out.
_FIXED: Final = struct.Struct(">BBHQ")


def _varint_at(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at`, and where what follows it starts (IndexError past the end)."""
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ValueError("a length in the packed answer is too long")


def _text_at(data: bytes, at: int) -> tuple[str, int]:
    size, at = _varint_at(data, at)
    end = at + size
    if end > len(data):
        raise ValueError("the packed answer ends early")
    return data[at:end].decode("latin-1"), end


def _digest_at(data: bytes, at: int) -> tuple[str, int]:
    if data[at] == _AS_BYTES:
        end = at + 2 + data[at + 1]
        if end > len(data):
            raise ValueError("the packed answer ends early")
        return data[at + 2 : end].hex(), end
    return _text_at(data, at)


def unpack_answer(packed: bytes, unknown: bool) -> tuple[Record, bytes]:
    """The record and inline body `pack_answer` packed (ValueError when it cannot be read)."""
    try:
        return _unpacked(packed, unknown)
    except IndexError:
        raise ValueError("the packed answer ends early") from None


def _unpacked(packed: bytes, unknown: bool) -> tuple[Record, bytes]:
    kind, flags = packed[0], packed[1]
    status = packed[2] << 8 | packed[3]
    if not 100 <= status <= 599:
        raise ValueError(f"the recorded status {status} is not an HTTP status")
    if len(packed) < 10:
        raise ValueError("the packed answer ends early")
    completed_ms = int.from_bytes(packed[4:10], "big")
    head, at = _text_at(packed, 10)
    extra_text, at = _text_at(packed, at)
    lines = head.split("\n")
    lines.pop()  # what follows the last line feed: nothing
    reason = lines.pop(0) if flags & _REASON else None
    if len(lines) % 2:
        raise ValueError("a header without its value")
    headers = list(zip(lines[::2], lines[1::2], strict=True))
    if unwritable_text(reason or "", headers):
        raise ValueError("a control byte in the recorded head")
    extra = orjson.loads(extra_text) if extra_text else {}
    if not isinstance(extra, dict):
        raise ValueError("the record's extra is not an object")
    blob, body = None, b""
    if kind == _INLINE:
        body = packed[at:]
        size, sha256 = len(body), ""
    elif kind == _BLOB:
        blob, at = _digest_at(packed, at)
        size, at = _varint_at(packed, at)
        sha256, at = _digest_at(packed, at)
    elif kind == _NOT_KEPT:
        size, at = _varint_at(packed, at)
        sha256, at = _digest_at(packed, at)
    else:
        raise ValueError(f"unknown body kind {kind}")
    if kind != _INLINE and at != len(packed):
        raise ValueError("bytes after the packed answer")
    record = Record(
        status=status,
        headers=headers,
        size=size,
        sha256=sha256,
        blob=blob,
        completed_at=completed_ms / 1000,
        unknown=unknown,
        extra=extra,
        reason=reason,
    )
    return record, body


# The codec bytes of dictionaries: the package's own from 1, a route's (trained at run time
# on its answers, `store.trained`) from OWN, read with the route of the record's key.
OWN: Final = 128
# Packed answers longer than this are compressed with the route's dictionary only.
_BOTH_UP_TO: Final = 16 << 10
_PARAMS: Final = zstandard.ZstdCompressionParameters.from_level(
    LEVEL,
    format=zstandard.FORMAT_ZSTD1_MAGICLESS,
    write_content_size=1,
    write_checksum=0,
    write_dict_id=0,
)


class Dictionary:
    """One zstd dictionary, ready to compress and decompress with, and its codec byte."""

    def __init__(self, number: int, data: bytes) -> None:
        if not 0 < number < 256:
            raise ValueError("dictionaries are numbered 1 to 255")
        self.number = number
        self.data = data
        prepared = zstandard.ZstdCompressionDict(data)
        prepared.precompute_compress(compression_params=_PARAMS)
        self.compressor = zstandard.ZstdCompressor(dict_data=prepared, compression_params=_PARAMS)
        self.decompressor = zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(data), format=zstandard.FORMAT_ZSTD1_MAGICLESS
        )


class Codec:
    """Packs and unpacks format-2 values with the dictionaries the package ships (numbered 1
    to OWN - 1) and, given one, a route's own. A dictionary, once values name it, must be
    kept for as long as records may hold it: its number is never reused."""

    def __init__(self, shipped: Mapping[int, bytes]) -> None:
        if not shipped or not all(0 < number < OWN for number in shipped):
            raise ValueError(f"shipped dictionaries are numbered 1 to {OWN - 1}")
        self.shipped = {number: Dictionary(number, data) for number, data in shipped.items()}
        self.newest = self.shipped[max(self.shipped)]

    def pack(
        self,
        state: str,
        fingerprint: bytes,
        token: str,
        packed: bytes,
        own: Dictionary | None = None,
    ) -> bytes:
        """The value of a packed answer (`pack_answer`) settled by `token`, the lost owner's
        token left empty for `complete.lua` to fill in: compressed with `own`, the route's
        dictionary, and with the newest shipped one too where the route's did poorly (an
        answer unlike those it was trained on), whichever is smaller; raw when neither
        makes it smaller."""
        answer = bytes((RAW,)) + packed
        for dictionary in (self.newest,) if own is None else (own, self.newest):
            compressed = dictionary.compressor.compress(packed)
            if len(compressed) + 1 < len(answer):
                answer = bytes((dictionary.number,)) + compressed
            if len(answer) * 4 < len(packed) * 3 or len(packed) > _BOTH_UP_TO:
                break  # a quarter smaller, or long: good enough for one try
        owner = token.encode("latin-1")
        head = bytes((VERSION, ord(state), len(fingerprint))) + fingerprint
        return b"".join(
            (head, bytes((len(owner),)), owner, b"\0", answer, _crc(answer).to_bytes(4, "big"))
        )

    @staticmethod
    def dictionary_of(value: bytes) -> int:
        """The codec byte of a format-2 value: which dictionary reads it (RAW: none; also
        for a value too short to say, which `unpack` refuses)."""
        at = _answer_at(value)
        return value[at] if at is not None and at < len(value) else RAW

    def unpack(
        self, value: bytes, own: Mapping[int, Dictionary] | None = None
    ) -> tuple[Record, bytes]:
        """The record and inline body of a format-2 value, with `own` the dictionaries of its
        route; ValueError when it cannot be read as written (damaged, truncated, of another
        version, or compressed with a dictionary neither shipped nor given)."""
        if len(value) < 3 or value[0] != VERSION:
            raise ValueError(f"not a record of format {VERSION}")
        state = chr(value[1])
        if state not in _STATES:
            raise ValueError(f"unknown record state {state!r}")
        at = _answer_at(value)
        if at is None or len(value) < at + 5:
            raise ValueError("the record ends early")
        answer, crc = value[at:-4], value[-4:]
        if _crc(answer).to_bytes(4, "big") != crc:
            raise ValueError("the record's checksum does not match: damaged or truncated")
        codec = answer[0]
        if codec == RAW:
            packed = answer[1:]
        else:
            dictionary = self.shipped.get(codec) if codec < OWN else (own or {}).get(codec)
            if dictionary is None:
                raise ValueError(f"compressed with dictionary {codec}, which is not at hand")
            try:
                packed = dictionary.decompressor.decompress(answer[1:])
            except zstandard.ZstdError as exc:
                raise ValueError(f"the answer does not decompress: {exc}") from exc
        return unpack_answer(packed, state == STATE_UNKNOWN)


def _answer_at(value: bytes) -> int | None:
    """Where a format-2 value's answer starts: past the fingerprint and both tokens."""
    if len(value) < 3:
        return None
    at = 3 + value[2]
    for _ in range(2):  # the owner's token, the lost owner's
        if at >= len(value):
            return None
        at += 1 + value[at]
    return at


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF
