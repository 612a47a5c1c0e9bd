"""Record format 2's values (`core.compact`): what they keep, and every way one that cannot be
read as written is refused rather than read wrong."""

from __future__ import annotations

import hashlib
import os
import zlib
from importlib.resources import files

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from gateway.core.compact import RAW, VERSION, Codec, fingerprint_field, pack_answer
from gateway.core.record import Record
from gateway.store.formats import shipped_codec

FP = fingerprint_field(hashlib.sha256(b"payload").hexdigest())
JSON = b'{"id":"pay_000123","amount":100,"currency":"EUR","status":"captured"}'
TYPICAL = Record(
    201,
    [
        ("Content-Type", "application/json; charset=utf-8"),
        ("Content-Length", str(len(JSON))),
        ("Date", "Sat, 28 Nov 2026 22:20:45 GMT"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
        ("X-Caf\xe9", "\xe9t\xe9"),  # Latin-1 bytes, as the upstream sent them
    ],
    len(JSON),
    "",
    completed_at=1_795_897_148.125,
    reason="Made",
)


@pytest.fixture(scope="module")
def codec() -> Codec:
    return shipped_codec()


def test_a_typical_answer_comes_back_as_it_was(codec: Codec) -> None:
    value = codec.pack("C", FP, "owner-token", pack_answer(TYPICAL, JSON))
    record, body = codec.unpack(value)
    assert (record, body) == (TYPICAL, JSON)
    answer = value[3 + len(FP) + 1 + len("owner-token") + 1 : -4]
    assert answer[0] != RAW and len(answer) < 0.7 * len(pack_answer(TYPICAL, JSON))


def test_the_scripts_read_state_fingerprint_and_tokens_at_the_front(codec: Codec) -> None:
    value = codec.pack("U", FP, "tok", pack_answer(TYPICAL, JSON))
    assert value[:3] == bytes((VERSION, ord("U"), len(FP))) and value[3:19] == FP
    assert value[19:23] == b"\x03tok" and value[23] == 0  # no lost owner's token yet


@pytest.mark.parametrize(
    "record, body",
    [
        (Record(204, [], 0, "", reason=None), b""),
        (Record(502, [], 0, "", unknown=True, extra={"failure": "reset", "seen": "502"}), b""),
        (Record(200, [("A", "")], 5, "e" * 64, blob="ab" * 16), b""),  # a blob pointer
        (Record(200, [], 9, "f" * 64, blob="s3-object/name.bin"), b""),  # a name not hex
        (Record(200, [], 70_000, "d" * 64, extra={"body": "too-large"}), b""),
        (Record(200, [], 70_000, "", extra={"body": "omitted"}), b""),
        (Record(200, [("Content-Type", "text/plain")], 3, "", reason=""), b"abc"),
    ],
)
def test_every_kind_of_record_comes_back(codec: Codec, record: Record, body: bytes) -> None:
    state = "U" if record.unknown else "C"
    assert codec.unpack(codec.pack(state, FP, "t", pack_answer(record, body))) == (record, body)


def test_an_incompressible_body_is_stored_raw_never_larger(codec: Codec) -> None:
    noise = os.urandom(2000)
    record = Record(200, [("Content-Type", "application/octet-stream")], len(noise), "")
    value = codec.pack("C", FP, "t", pack_answer(record, noise))
    packed = pack_answer(record, noise)
    answer_at = 3 + len(FP) + 1 + 1 + 1
    assert value[answer_at] == RAW
    assert len(value) == answer_at + 1 + len(packed) + 4  # the packed answer and its CRC only
    assert codec.unpack(value) == (record, noise)


latin1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"))


@given(
    status=st.integers(100, 599),
    reason=st.none() | latin1,
    headers=st.lists(st.tuples(latin1.filter(bool), latin1), max_size=12),
    body=st.binary(max_size=3000),
)
def test_any_writable_answer_comes_back_byte_for_byte(
    status: int, reason: str | None, headers: list[tuple[str, str]], body: bytes
) -> None:
    record = Record(status, headers, len(body), "", completed_at=12.5, reason=reason)
    codec = shipped_codec()
    assert codec.unpack(codec.pack("C", FP, "t", pack_answer(record, body))) == (record, body)


def _damaged(codec: Codec) -> dict[str, bytes]:
    value = codec.pack("C", FP, "tok", pack_answer(TYPICAL, JSON))
    flipped = bytearray(value)
    flipped[len(value) // 2 + 10] ^= 0x20
    answer_at = 3 + len(FP) + 4 + 1
    unknown_dictionary = bytearray(value)
    unknown_dictionary[answer_at] = 200
    crc = zlib.crc32(bytes(unknown_dictionary[answer_at:-4])).to_bytes(4, "big")
    unknown_dictionary[-4:] = crc  # a whole value, compressed with a dictionary not shipped
    other_version = bytes((VERSION + 1,)) + value[1:]
    other_state = value[:1] + b"X" + value[2:]
    return {
        "truncated": value[:-7],
        "cut-in-the-head": value[:12],
        "empty": b"",
        "flipped-byte": bytes(flipped),
        "unknown-dictionary": bytes(unknown_dictionary),
        "other-version": other_version,
        "other-state": other_state,
        "format-1-json": TYPICAL.encode(),
    }


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "cut-in-the-head",
        "empty",
        "flipped-byte",
        "unknown-dictionary",
        "other-version",
        "other-state",
        "format-1-json",
    ],
)
def test_a_value_that_cannot_be_read_as_written_is_refused(codec: Codec, damage: str) -> None:
    with pytest.raises(ValueError):
        codec.unpack(_damaged(codec)[damage])


def test_a_corrupt_frame_behind_a_good_checksum_is_refused() -> None:
    """A frame that does not decompress (written so, its CRC made to match) is a ValueError,
    not zstd's own error."""
    codec = Codec(
        {1: zstandard.train_dictionary(1024, [pack_answer(TYPICAL, JSON)] * 50).as_bytes()}
    )
    answer = bytes((1,)) + b"\x00\x11garbage"
    value = bytes((VERSION, ord("C"), 0, 0, 0)) + answer + zlib.crc32(answer).to_bytes(4, "big")
    with pytest.raises(ValueError, match="decompress"):
        codec.unpack(value)


def test_dictionaries_are_numbered_as_codec_bytes() -> None:
    with pytest.raises(ValueError):
        Codec({0: b"x" * 100})
    with pytest.raises(ValueError):
        Codec({})


def test_a_record_compressed_with_an_older_dictionary_is_still_read() -> None:
    """A new dictionary is added with a new number; what the old one compressed still reads."""
    samples = [pack_answer(TYPICAL, JSON + bytes([n])) for n in range(60)]
    old = zstandard.train_dictionary(2048, samples).as_bytes()
    value = Codec({1: old}).pack("C", FP, "t", pack_answer(TYPICAL, JSON))
    shipped = files("gateway.store.dictionaries").joinpath("1.zdict").read_bytes()
    newer = Codec({1: old, 2: shipped})
    assert newer.unpack(value) == (TYPICAL, JSON)
    assert newer.pack("C", FP, "t", pack_answer(TYPICAL, JSON))[3 + len(FP) + 3] == 2  # the newest


def test_fingerprints_are_kept_as_128_bits() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert fingerprint_field(digest) == bytes.fromhex(digest)[:16]
    assert fingerprint_field("-") == b"-"  # a route that fingerprints nothing
    assert fingerprint_field("z" * 64) == b"z" * 64  # no digest: as text


def test_a_body_that_is_not_the_records_is_not_kept(codec: Codec) -> None:
    """Its size another than the record says: the record as it says, no bytes after it."""
    record = Record(200, [("A", "1")], 3, "d" * 64, extra={"body": "omitted"})
    value = codec.pack("C", FP, "t", pack_answer(record, b"abcdef"))
    assert codec.unpack(value) == (record, b"")
    mismatched = Record(200, [], 3, "")
    assert codec.unpack(codec.pack("C", FP, "t", pack_answer(mismatched, b"abcdef")))[1] == b""
