"""Record format 2: a settled record as one Redis string, its answer packed and compressed.

What the Lua scripts read comes first, uncompressed, as `core.layout` defines it (kind,
fingerprint, when the answer was stored, an unknown outcome's lost owner's token); the answer
follows, opaque to them: a codec byte (two for a route's trained dictionary), then the packed
answer, compressed by zstd with the dictionary the codec names (one the package ships, or one
a route trained on its own answers: `store.trained`), or raw where compressing would not make
it smaller. The value ends with a CRC-32 over every byte before it and over the packed answer
as decoded, which `unpack` checks: a value damaged in any byte, or read with another
dictionary than its own (or a damaged one), is a ValueError, never a wrong answer.

The packed answer holds only what cannot be recomputed:

    kind | flags | status (2 bytes) | head | extra | body

each variable part after its length (a LEB128 varint); `kind` says whether the body is
inline (the rest of the packed answer), in the blob store (its name, size and SHA-256), or
not recorded (its size and digest). Names, values and the reason are Latin-1 text, a byte a
character, as `core.record.Record` holds them. A `Date` that is the time the answer was
stored, to the second or up to MAX_DATE_LAG seconds before it, in RFC 9110's IMF-fixdate, and a
`Content-Length` that is the body's size, are kept as their header's index rather than as text
(and the Date's lag): each is written back exactly as it came.

Values of release 0007fac (`layout.V2`: the owner's tokens in front, the time in the packed
answer, the CRC over the compressed answer, a route's dictionary named by its number in the
hash `store.trained` reads it from) are read as they were written.
"""

from __future__ import annotations

import email.utils
import hashlib
import re
import struct
import zlib
from collections.abc import Mapping
from typing import Final

import orjson
import zstandard

from gateway.core import layout
from gateway.core.headers import unwritable_text
from gateway.core.record import STATE_COMPLETED, STATE_UNKNOWN, Record

RAW: Final = 0  # the codec byte of an answer stored as packed, not compressed
LEVEL: Final = 3  # zstd's default: smaller answers no better at 19, and several times slower
TRAINED: Final = 0x80  # a codec byte with this bit: a route's dictionary, its id in 15 bits
MAX_DATE_LAG: Final = 99  # seconds a `Date` may be older than the stored time, kept as a mark

_INLINE: Final = 0
_BLOB: Final = 1
_NOT_KEPT: Final = 2  # no body kept (too large, omitted, or none at all): its size only

_HEX_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_HEX_NAME: Final = re.compile(r"[0-9a-f]{32}")
_AS_BYTES: Final = 0xFF  # a digest field's marker: what follows is the digest's hex as bytes
_REASON: Final = 1  # the flags' bit: the head's first line is the upstream's reason phrase
# The flags' bits of a header whose value is written back: a Content-Length that is the body's
# size, a Date of the time stored (less a lag); its index (and the lag) after the fixed part.
_SIZED: Final = 2
_DATED: Final = 4
_MARKABLE: Final = frozenset({len("date"), len("content-length")})  # the names' lengths
_KINDS: Final = {STATE_COMPLETED: layout.COMPLETED, STATE_UNKNOWN: layout.UNKNOWN}
_COMPLETED: Final = bytes((layout.COMPLETED,))


def fingerprint_field(fingerprint: str) -> bytes:
    """The fingerprint as a value holds it (`layout.FINGERPRINT` bytes): a SHA-256 hex digest's
    first bits as bytes; any other (a route's "-") hashed so."""
    field = _digest_head(fingerprint, layout.FINGERPRINT) if len(fingerprint) == 64 else None
    if field is None:  # no digest: hashed as any other text
        field = hashlib.sha256(fingerprint.encode("latin-1")).digest()[: layout.FINGERPRINT]
    return field if field != layout.ANY else field[:-1] + b"\xfe"  # never the wildcard


def fingerprint_of_v2(field: bytes) -> bytes:
    """This release's fingerprint field of a request whose 0007fac value holds `field`."""
    if len(field) == 16:  # a digest's first 128 bits
        return field[: layout.FINGERPRINT]
    return hashlib.sha256(field).digest()[: layout.FINGERPRINT]


def v2_fingerprint_field(fingerprint: str) -> bytes:
    """The fingerprint as a value of release 0007fac holds it: a SHA-256 hex digest's first 128
    bits as bytes, any other as its text."""
    field = _digest_head(fingerprint, 16) if len(fingerprint) == 64 else None
    return fingerprint.encode("latin-1") if field is None else field


def _digest_head(digest: str, size: int) -> bytes | None:
    """The first `size` bytes of a hex digest; None where it is no hex (a plain try: compiled,
    a `with contextlib.suppress` costs a context manager's calls, twice a request)."""
    try:
        return bytes.fromhex(digest[: 2 * size])
    except ValueError:
        return None


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


def _imf_date(second: int) -> str:
    """RFC 9110's IMF-fixdate of a unix second (`Sun, 06 Nov 1994 08:49:37 GMT`), the last
    few made kept: most answers come, and are replayed, within seconds of each other."""
    made = _DATES.get(second)
    if made is None:
        if len(_DATES) >= 8:
            _DATES.clear()
        made = _DATES[second] = email.utils.formatdate(second, usegmt=True)
    return made


_DATES: Final[dict[int, str]] = {}


def _date_lag(value: str, second: int) -> int | None:
    """How many seconds before `second` a `Date` value is, if it is that second's IMF-fixdate
    less at most MAX_DATE_LAG seconds (a mark can stand for it); else None."""
    for lag in (0, 1):  # most answers are stored within the second they are dated
        if _imf_date(second - lag) == value:
            return lag
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    lag = second - email.utils.mktime_tz(parsed)
    return lag if 0 <= lag <= MAX_DATE_LAG and _imf_date(second - lag) == value else None


def _body_size(packed: bytes, at: int, kind: int) -> int:
    """The size of the body whose place (`kind`) begins at `at` in `packed`."""
    if kind == _INLINE:
        return len(packed) - at
    if kind == _BLOB:
        at = _digest_at(packed, at)[1]
    return _varint_at(packed, at)[0]


def stored_ms(record: Record) -> int:
    """When the record was stored, in unix milliseconds, as a value keeps it."""
    return max(0, round(record.completed_at * 1000))


def pack_answer(record: Record, body: bytes) -> bytes:
    """The packed answer of `record`, its inline `body` last (a body that is not the
    record's, its size or kind another, is not kept).

    The head is one text: the reason phrase (when the upstream gave one) and each header's
    name and value, each followed by a line feed, which no recorded head holds (an answer
    whose head has a control byte is refused before it is recorded: `core.headers`). A
    `Date` or `Content-Length` that can be written back from the time stored and the body's
    size is kept empty, its index (and the Date's lag) before the head. The time it was
    stored is the value's (`layout.TIME`)."""
    if record.blob is not None:
        kind, where = _BLOB, _digest(record.blob) + _varint(record.size) + _digest(record.sha256)
    elif record.size == len(body) and not record.extra.get("body"):
        kind, where = _INLINE, ""  # its size and digest are the body's own: not stored
    else:
        kind, where = _NOT_KEPT, _varint(record.size) + _digest(record.sha256)
    second = stored_ms(record) // 1000
    lines: list[str] = []
    flags, sized, dated = 0, "", ""
    for index, (name, value) in enumerate(record.headers):
        if len(name) in _MARKABLE and index < 0x100:  # cheaper than lowering every name
            lowered = name.lower()
            if lowered == "content-length" and not sized and value == str(record.size):
                flags, sized, value = flags | _SIZED, chr(index), ""
            elif lowered == "date" and not dated:
                lag = _date_lag(value, second)
                if lag is not None:
                    flags, dated, value = flags | _DATED, chr(index) + chr(lag), ""
        lines += (name, value)
    marks = sized + dated
    if record.reason is not None:
        lines.insert(0, record.reason)
        flags |= _REASON
    head = "\n".join(lines) + "\n" if lines else ""
    extra = orjson.dumps(record.extra).decode() if record.extra else ""
    fixed = _FIXED.pack(kind, flags, record.status)
    text = "".join((marks, _text(head), _text(extra), where)).encode("latin-1")
    return b"".join((fixed, text, body if kind == _INLINE else b""))


_FIXED: Final = struct.Struct(">BBH")  # kind, flags, status


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


def unpack_answer(
    packed: bytes, unknown: bool, completed_ms: int | None = None
) -> tuple[Record, bytes]:
    """The record and inline body `pack_answer` packed, stored at `completed_ms` (None: a
    packed answer of release 0007fac, the time in it); ValueError when it cannot be read."""
    try:
        return _unpacked(packed, unknown, completed_ms)
    except IndexError:
        raise ValueError("the packed answer ends early") from None


def _unpacked(packed: bytes, unknown: bool, completed_ms: int | None) -> tuple[Record, bytes]:
    kind, flags = packed[0], packed[1]
    status = packed[2] << 8 | packed[3]
    if not 100 <= status <= 599:
        raise ValueError(f"the recorded status {status} is not an HTTP status")
    at = _FIXED.size
    if completed_ms is None:  # 0007fac's: the time in six bytes after the status
        if len(packed) < 10:
            raise ValueError("the packed answer ends early")
        completed_ms, at = int.from_bytes(packed[4:10], "big"), 10
    sized = dated = lag = -1
    if flags & _SIZED:
        sized, at = packed[at], at + 1
    if flags & _DATED:
        dated, lag, at = packed[at], packed[at + 1], at + 2
    head, at = _text_at(packed, at)
    extra_text, at = _text_at(packed, at)
    lines = head.split("\n")
    lines.pop()  # what follows the last line feed: nothing
    reason = lines.pop(0) if flags & _REASON else None
    if len(lines) % 2:
        raise ValueError("a header without its value")
    if sized >= 0 or dated >= 0:  # their values as the marks say: written back here
        if max(sized, dated) >= len(lines) // 2:
            raise ValueError("a mark past the recorded headers")
        if sized >= 0:
            lines[2 * sized + 1] = str(_body_size(packed, at, kind))
        if dated >= 0:
            lines[2 * dated + 1] = _imf_date(completed_ms // 1000 - lag)
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


# The codec bytes of 0007fac's values that name a route's dictionary (`store.trained`).
V2_OWN: Final = 128
# Packed answers longer than this are compressed with the route's dictionary only.
_BOTH_UP_TO: Final = 16 << 10
# Frames without zstd's magic number, dictionary id, checksum or content size (the value's
# own CRC covers what they would check; its answer is read to the frame's end).
_PARAMS: Final = zstandard.ZstdCompressionParameters.from_level(
    LEVEL,
    format=zstandard.FORMAT_ZSTD1_MAGICLESS,
    write_content_size=0,
    write_checksum=0,
    write_dict_id=0,
)


class Dictionary:
    """One zstd dictionary, ready to compress and decompress with, and what values call it:
    a shipped one's number (1 to 127), a route's trained one's (two codec bytes, the first
    with the `TRAINED` bit: `trained_number`), or 0007fac's number for a route's own (V2_OWN
    to 255, read only). ValueError for bytes zstd cannot load as a dictionary."""

    def __init__(self, number: int, data: bytes) -> None:
        if not 0 < number <= 0xFFFF:
            raise ValueError("dictionaries are numbered 1 to 65535")
        self.number = number
        self.data = data
        try:
            prepared = zstandard.ZstdCompressionDict(data)
            prepared.precompute_compress(compression_params=_PARAMS)
            self.compressor = zstandard.ZstdCompressor(
                dict_data=prepared, compression_params=_PARAMS
            )
            self.decompressor = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(data),
                format=zstandard.FORMAT_ZSTD1_MAGICLESS,
            )
        except zstandard.ZstdError as exc:
            raise ValueError(f"not a dictionary zstd can load: {exc}") from exc

    def codec(self) -> bytes:
        """The codec bytes of a value compressed with it (this release's layout)."""
        if self.number < TRAINED:
            return bytes((self.number,))
        if self.number < TRAINED << 8:
            raise ValueError(f"dictionary {self.number} is 0007fac's: read, never written")
        return self.number.to_bytes(2, "big")


def trained_number(ident: int) -> int:
    """The number of a route's trained dictionary of id `ident` (15 bits): its codec bytes."""
    if not 0 <= ident < 1 << 15:
        raise ValueError("a trained dictionary's id is 15 bits")
    return TRAINED << 8 | ident


class Needs:
    """A value's route dictionary, which the caller must find: its id (`trained`, this
    release's), or its number in 0007fac's hash of the route (`v2`)."""

    __slots__ = ("number", "v2")

    def __init__(self, number: int, v2: bool) -> None:
        self.number = number
        self.v2 = v2


def outcome_identity(state: str, fingerprint: bytes, completed_ms: int) -> bytes:
    """The first bytes of the value of an outcome (`layout.IDENTITY`): what tells it from
    another, however it is compressed or in whichever format it is written."""
    return bytes((_KINDS[state],)) + fingerprint + completed_ms.to_bytes(layout.TIME, "big")


class Codec:
    """Packs and unpacks format-2 values with the dictionaries the package ships (numbered 1
    to 127) and, given one, a route's own. A dictionary, once values name it, must be kept
    for as long as records may hold it: a shipped number is never reused."""

    def __init__(self, shipped: Mapping[int, bytes]) -> None:
        if not shipped or not all(0 < number < TRAINED for number in shipped):
            raise ValueError(f"shipped dictionaries are numbered 1 to {TRAINED - 1}")
        self.shipped = {number: Dictionary(number, data) for number, data in shipped.items()}
        self.newest = self.shipped[max(self.shipped)]

    def pack(
        self,
        state: str,
        fingerprint: bytes,
        packed: bytes,
        completed_ms: int,
        own: Dictionary | None = None,
        lost: bytes = b"",
    ) -> bytes:
        """The value of a packed answer (`pack_answer`) stored at `completed_ms`: compressed
        with `own`, the route's dictionary, and with the newest shipped one too where the
        route's did poorly (an answer unlike those it was trained on), whichever is smaller;
        raw when neither makes it smaller. `lost`: an unknown outcome's lost owner's token."""
        if len(fingerprint) != layout.FINGERPRINT:
            raise ValueError(f"a fingerprint field is {layout.FINGERPRINT} bytes")
        head = outcome_identity(state, fingerprint, completed_ms)
        if state == STATE_UNKNOWN:
            head += bytes((len(lost),)) + lost
        elif lost:
            raise ValueError("only an unknown outcome keeps the lost owner's token")
        answer = bytes((RAW,)) + packed
        for dictionary in (self.newest,) if own is None else (own, self.newest):
            compressed = dictionary.compressor.compress(packed)
            codec = dictionary.codec()
            if len(compressed) + len(codec) < len(answer):
                answer = codec + compressed
            if len(answer) * 4 < len(packed) * 3 or len(packed) > _BOTH_UP_TO:
                break  # a quarter smaller, or long: good enough for one try
        checksum = zlib.crc32(packed, zlib.crc32(answer, zlib.crc32(head)))
        return b"".join((head, answer, checksum.to_bytes(layout.CHECKSUM, "big")))

    @staticmethod
    def needs(value: bytes) -> Needs | None:
        """The route dictionary a value needs, or None (raw, shipped, or unreadable: `unpack`
        says which)."""
        kind = value[0] if value else 0
        if kind == layout.COMPLETED:  # most: the codec right after the identity
            at = layout.IDENTITY
        else:
            found = layout.fields(value)
            if found is None:
                return None
            at = found.codec_at
        if at + 1 >= len(value):
            return None
        codec = value[at]
        if kind == layout.V2:
            return Needs(codec, True) if codec >= V2_OWN else None
        if codec & TRAINED:
            return Needs(int.from_bytes(value[at : at + 2], "big"), False)
        return None

    def unpack(
        self, value: bytes, own: Mapping[int, Dictionary] | None = None
    ) -> tuple[Record, bytes]:
        """The record and inline body of a format-2 value, with `own` its route's dictionaries
        (by id, or by 0007fac's number for a V2 value); ValueError when it cannot be read as
        written (damaged in any byte, truncated, of another version, or compressed with a
        dictionary neither shipped nor given, or with another than the one given)."""
        if value[:1] == _COMPLETED and len(value) >= layout.SHORTEST:
            at, unknown = layout.IDENTITY, False  # most: no lost owner's token to step over
        else:
            found = layout.fields(value)
            if found is None or found.state not in (STATE_COMPLETED, STATE_UNKNOWN):
                raise ValueError("not a format-2 record this release reads")
            if value[0] == layout.V2:
                return self._unpack_v2(value, found, own)
            at, unknown = found.codec_at, found.state == STATE_UNKNOWN
        codec = value[at]
        if codec == RAW:
            packed = value[at + 1 : -layout.CHECKSUM]
        else:
            if codec & TRAINED:
                number, at = int.from_bytes(value[at : at + 2], "big"), at + 2
                dictionary = (own or {}).get(number)
            else:
                number, at = codec, at + 1
                dictionary = self.shipped.get(number)
            if dictionary is None:
                raise ValueError(f"compressed with dictionary {number}, which is not at hand")
            packed = _decompressed(dictionary, value[at : -layout.CHECKSUM], sized=False)
        stored = value[: -layout.CHECKSUM]
        checksum = zlib.crc32(packed, zlib.crc32(stored))
        if checksum.to_bytes(layout.CHECKSUM, "big") != value[-layout.CHECKSUM :]:
            raise ValueError("the record's checksum does not match: damaged, or another dictionary")
        completed_ms = int.from_bytes(value[layout.IDENTITY - layout.TIME : layout.IDENTITY], "big")
        return unpack_answer(packed, unknown, completed_ms)

    def _unpack_v2(
        self, value: bytes, found: layout.Fields, own: Mapping[int, Dictionary] | None
    ) -> tuple[Record, bytes]:
        """A value of release 0007fac: its CRC covers the codec byte and the answer as stored."""
        answer, crc = value[found.codec_at : -4], value[-4:]
        if len(answer) < 1 or zlib.crc32(answer).to_bytes(4, "big") != crc:
            raise ValueError("the record's checksum does not match: damaged or truncated")
        codec = answer[0]
        if codec == RAW:
            packed = answer[1:]
        else:
            dictionary = self.shipped.get(codec) if codec < V2_OWN else (own or {}).get(codec)
            if dictionary is None:
                raise ValueError(f"compressed with dictionary {codec}, which is not at hand")
            packed = _decompressed(dictionary, answer[1:])
        return unpack_answer(packed, found.state == STATE_UNKNOWN)


def _decompressed(dictionary: Dictionary, frame: bytes, sized: bool = True) -> bytes:
    """A frame's content: one that names its size (0007fac's) read whole, one that does not
    (this release's) read to its end."""
    try:
        if sized:
            return dictionary.decompressor.decompress(frame)
        content: bytes = dictionary.decompressor.decompressobj().decompress(frame)
        return content
    except zstandard.ZstdError as exc:
        raise ValueError(f"the answer does not decompress: {exc}") from exc
