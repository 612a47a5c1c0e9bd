"""Record format 2's values (`core.compact`): what they keep, and every way one that cannot be
read as written (damaged in any byte, or read with another dictionary than its own, or a
damaged one) is refused rather than read wrong."""

from __future__ import annotations

import hashlib
import os
from importlib.resources import files

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from gateway.core import layout
from gateway.core.compact import (
    RAW,
    Codec,
    Dictionary,
    fingerprint_field,
    fingerprint_of_v2,
    pack_answer,
    stored_ms,
    trained_number,
    v2_fingerprint_field,
)
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
    value = codec.pack("C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL))
    record, body = codec.unpack(value)
    assert (record, body) == (TYPICAL, JSON)
    answer = value[layout.IDENTITY : -layout.CHECKSUM]
    assert answer[0] != RAW and len(answer) < 0.7 * len(pack_answer(TYPICAL, JSON))


def test_the_scripts_read_state_fingerprint_and_lost_token_at_the_front(codec: Codec) -> None:
    completed = codec.pack("C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL))
    assert completed[0] == layout.COMPLETED and completed[1:9] == FP
    assert completed[9:15] == stored_ms(TYPICAL).to_bytes(6, "big")
    unknown = codec.pack("U", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL), lost=b"tok")
    assert unknown[0] == layout.UNKNOWN and unknown[15:19] == b"\x03tok"
    assert layout.fields(unknown) == layout.Fields("U", FP, b"tok", 19, unknown[:15])
    with pytest.raises(ValueError):
        codec.pack(
            "C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL), lost=b"tok"
        )  # a completed one: none


def test_a_date_of_the_stored_second_and_the_bodys_length_are_kept_as_marks() -> None:
    """Written back exactly as they came; any other value is kept as it came."""
    at = 1_795_904_445.9  # Sat, 28 Nov 2026 22:20:45 GMT
    for date, marked in [
        ("Sat, 28 Nov 2026 22:20:45 GMT", True),
        ("Sat, 28 Nov 2026 22:20:44 GMT", True),
        ("Sat, 28 Nov 2026 22:19:07 GMT", True),  # 98 s before it was stored
        ("Sat, 28 Nov 2026 22:17:45 GMT", False),  # 180 s before: kept as text
        ("Sat, 28 Nov 2026 22:20:46 GMT", False),  # after it
        ("Saturday, 28-Nov-26 22:20:45 GMT", False),  # RFC 850's form
        ("sat, 28 Nov 2026 22:20:45 GMT", False),
    ]:
        for length in (str(len(JSON)), "999", f"0{len(JSON)}"):
            record = Record(
                200, [("Date", date), ("content-length", length)], len(JSON), "", completed_at=at
            )
            packed = pack_answer(record, JSON)
            assert (date.encode() not in packed) is marked, date
            assert (f"\n{length}\n".encode() not in packed) is (length == str(len(JSON)))
            assert shipped_codec().unpack(
                shipped_codec().pack("C", FP, packed, stored_ms(record))
            ) == (record, JSON)


@pytest.mark.parametrize(
    "record, body",
    [
        (Record(204, [], 0, "", reason=None), b""),
        (Record(502, [], 0, "", unknown=True, extra={"failure": "reset", "seen": "502"}), b""),
        (Record(200, [("A", "")], 5, "e" * 64, blob="ab" * 16), b""),  # a blob pointer
        (Record(200, [("Content-Length", "5")], 5, "e" * 64, blob="ab" * 16), b""),
        (Record(200, [], 9, "f" * 64, blob="s3-object/name.bin"), b""),  # a name not hex
        (
            Record(
                200, [("Content-Length", "70000")], 70_000, "d" * 64, extra={"body": "too-large"}
            ),
            b"",
        ),
        (Record(200, [], 70_000, "", extra={"body": "omitted"}), b""),
        (Record(200, [("Content-Type", "text/plain")], 3, "", reason=""), b"abc"),
    ],
)
def test_every_kind_of_record_comes_back(codec: Codec, record: Record, body: bytes) -> None:
    state = "U" if record.unknown else "C"
    assert codec.unpack(codec.pack(state, FP, pack_answer(record, body), stored_ms(record))) == (
        record,
        body,
    )


def test_an_incompressible_body_is_stored_raw_never_larger(codec: Codec) -> None:
    noise = os.urandom(2000)
    record = Record(200, [("Content-Type", "application/octet-stream")], len(noise), "")
    value = codec.pack("C", FP, pack_answer(record, noise), stored_ms(record))
    packed = pack_answer(record, noise)
    answer_at = layout.IDENTITY
    assert value[answer_at] == RAW
    assert len(value) == answer_at + 1 + len(packed) + 4  # the packed answer and its CRC only
    assert codec.unpack(value) == (record, noise)


latin1 = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"))


@given(
    status=st.integers(100, 599),
    reason=st.none() | latin1,
    headers=st.lists(st.tuples(latin1.filter(bool), latin1), max_size=12),
    body=st.binary(max_size=3000),
    at=st.floats(0, 4e9, allow_nan=False),
)
def test_any_writable_answer_comes_back_byte_for_byte(
    status: int, reason: str | None, headers: list[tuple[str, str]], body: bytes, at: float
) -> None:
    record = Record(
        status, headers, len(body), "", completed_at=round(at * 1000) / 1000, reason=reason
    )
    codec = shipped_codec()
    assert codec.unpack(codec.pack("C", FP, pack_answer(record, body), stored_ms(record))) == (
        record,
        body,
    )


def _trained() -> Dictionary:
    samples = [pack_answer(TYPICAL, JSON + bytes([n])) for n in range(60)]
    return Dictionary(trained_number(7), zstandard.train_dictionary(1024, samples).as_bytes())


@pytest.mark.parametrize("state", ["C", "U"])
def test_a_value_damaged_in_any_byte_is_refused(codec: Codec, state: str) -> None:
    """Every byte of a value, each of its bits flipped in turn: never another answer."""
    own = _trained()
    lost = b"lost-owner" if state == "U" else b""
    for dictionary in (None, own):
        value = codec.pack(
            state, FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL), dictionary, lost
        )
        for at in range(len(value)):
            for bit in range(8):
                damaged = bytearray(value)
                damaged[at] ^= 1 << bit
                with pytest.raises(ValueError):
                    codec.unpack(bytes(damaged), {own.number: own})


def test_a_value_read_with_another_or_a_damaged_dictionary_is_refused(codec: Codec) -> None:
    own = _trained()
    value = codec.pack("C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL), own)
    assert Codec.needs(value) is not None and Codec.needs(value).number == own.number  # type: ignore[union-attr]
    assert codec.unpack(value, {own.number: own}) == (TYPICAL, JSON)
    other = Dictionary(own.number, codec.newest.data)  # another content under its number
    data = bytearray(own.data)
    data[len(data) // 2] ^= 0x04  # one bit of its content
    damaged = Dictionary(own.number, bytes(data))
    for wrong in (other, damaged):
        with pytest.raises(ValueError):
            codec.unpack(value, {own.number: wrong})
    with pytest.raises(ValueError, match="not at hand"):
        codec.unpack(value)


def _damaged(codec: Codec) -> dict[str, bytes]:
    value = codec.pack("C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL))
    unknown_dictionary = bytearray(value)
    unknown_dictionary[layout.IDENTITY] = 100
    return {
        "truncated": value[:-7],
        "cut-in-the-head": value[:12],
        "empty": b"",
        "unknown-dictionary": bytes(unknown_dictionary),
        "other-version": bytes((9,)) + value[1:],
        "format-1-json": TYPICAL.encode(),
    }


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",
        "cut-in-the-head",
        "empty",
        "unknown-dictionary",
        "other-version",
        "format-1-json",
    ],
)
def test_a_value_that_cannot_be_read_as_written_is_refused(codec: Codec, damage: str) -> None:
    with pytest.raises(ValueError):
        codec.unpack(_damaged(codec)[damage])


def test_a_corrupt_frame_behind_a_good_checksum_is_refused() -> None:
    """A frame that does not decompress is a ValueError, not zstd's own error."""
    codec = Codec(
        {1: zstandard.train_dictionary(1024, [pack_answer(TYPICAL, JSON)] * 50).as_bytes()}
    )
    value = bytes((layout.COMPLETED,)) + FP + bytes(6) + b"\x01\x00\x11garbage" + bytes(4)
    with pytest.raises(ValueError, match="decompress"):
        codec.unpack(value)


def test_dictionaries_are_numbered_as_codec_bytes() -> None:
    with pytest.raises(ValueError):
        Codec({0: b"x" * 100})
    with pytest.raises(ValueError):
        Codec({})
    with pytest.raises(ValueError):
        Codec({128: b"x" * 100})  # a trained dictionary's codec: never a shipped one's
    damaged = bytearray(_trained().data)
    damaged[10] ^= 0xFF  # in its entropy tables: zstd refuses it
    with pytest.raises(ValueError):
        Dictionary(5, bytes(damaged))


def test_a_record_compressed_with_an_older_dictionary_is_still_read() -> None:
    """A new dictionary is added with a new number; what the old one compressed still reads."""
    samples = [pack_answer(TYPICAL, JSON + bytes([n])) for n in range(60)]
    old = zstandard.train_dictionary(2048, samples).as_bytes()
    value = Codec({1: old}).pack("C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL))
    shipped = files("gateway.store.dictionaries").joinpath("1.zdict").read_bytes()
    newer = Codec({1: old, 2: shipped})
    assert newer.unpack(value) == (TYPICAL, JSON)
    assert (
        newer.pack("C", FP, pack_answer(TYPICAL, JSON), stored_ms(TYPICAL))[layout.IDENTITY] == 2
    )  # the newest


def test_fingerprints_are_kept_as_64_bits() -> None:
    """Enough to tell a client's payloads under one key apart (it alone can make two meet,
    and gains nothing it could not have by sending the first again)."""
    digest = hashlib.sha256(b"x").hexdigest()
    assert fingerprint_field(digest) == bytes.fromhex(digest)[:8]
    assert (
        fingerprint_field("-") == hashlib.sha256(b"-").digest()[:8]
    )  # a route that fingerprints nothing
    assert fingerprint_field("z" * 64) == hashlib.sha256(b"z" * 64).digest()[:8]
    for fingerprint in (digest, "-"):  # what a 0007fac value holds of the same request
        assert fingerprint_of_v2(v2_fingerprint_field(fingerprint)) == fingerprint_field(
            fingerprint
        )


def test_a_body_that_is_not_the_records_is_not_kept(codec: Codec) -> None:
    """Its size another than the record says: the record as it says, no bytes after it."""
    record = Record(200, [("A", "1")], 3, "d" * 64, extra={"body": "omitted"})
    value = codec.pack("C", FP, pack_answer(record, b"abcdef"), stored_ms(record))
    assert codec.unpack(value) == (record, b"")
    mismatched = Record(200, [], 3, "")
    assert (
        codec.unpack(
            codec.pack("C", FP, pack_answer(mismatched, b"abcdef"), stored_ms(mismatched))
        )[1]
        == b""
    )
