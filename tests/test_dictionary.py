"""The dictionaries of format-2 records: none changes once shipped, and values made with
dictionary 1 from a committed corpus (tests/dictionary) read back as written, and as small
as they were when measured."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import pytest
import zstandard

from gateway.core import layout
from gateway.core.compact import Codec, pack_answer, stored_ms
from gateway.core.record import Record
from gateway.store.dictionaries import shipped

# Every dictionary shipped, by number, and its SHA-256: stored records need those exact bytes.
SHIPPED = {1: "ec819435253eece80b87110c777be82df2591e140f5bad6dc243b2f31d161425"}
CORPUS = Path(__file__).parent / "dictionary" / "answers.jsonl"
# What the corpus's answers compress to with dictionary 1, in all (the zstd frames alone, as
# values hold them, without their content size; not the value's fields around them), measured
# once with the zstd named. zstd makes the same bytes of the same input, dictionary, level
# and parameters; a level one off moves the total by about 30 bytes (level 4) or by 4-6% (2
# or 5), and no dictionary doubles it: with that zstd it must be exact. Another zstd release
# may find other matches for a few bytes, so with one the total must be within 1%, which
# still shows every other level and a missing dictionary.
COMPRESSED = 14_672
COMPRESSED_BY = (1, 5, 7)
FINGERPRINT = bytes(layout.FINGERPRINT)
LOST = b"7" * 32  # an unknown outcome's lost owner's token


@functools.cache
def _corpus() -> list[tuple[str, bool, Record, bytes]]:
    """Each answer of the corpus: its style, whether training held it out, record and body."""
    out = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        fields = json.loads(line)
        record = Record(
            status=fields["status"],
            headers=[(name, value) for name, value in fields["headers"]],
            size=fields["size"],
            sha256=fields["sha256"],
            completed_at=fields["completed_at"],
            reason=fields["reason"],
        )
        out.append((fields["style"], fields["held_out"], record, fields["body"].encode("latin-1")))
    return out


@functools.cache
def _dictionary_1() -> Codec:
    """The codec that compresses with dictionary 1, whatever dictionaries are shipped after it."""
    return Codec({1: shipped()[1]})


def _with_dictionary_1(state: str, record: Record, body: bytes) -> bytes:
    """The value the gateway stores of `record`, compressed with dictionary 1."""
    lost = LOST if state == "U" else b""
    packed = pack_answer(record, body)
    return _dictionary_1().pack(state, FINGERPRINT, packed, stored_ms(record), lost=lost)


def test_the_dictionaries_shipped_are_the_ones_recorded() -> None:
    """A number once shipped is never reused or changed: a new dictionary is a new number,
    recorded here."""
    digests = {number: hashlib.sha256(data).hexdigest() for number, data in shipped().items()}
    assert digests == SHIPPED


def test_the_corpus_is_the_one_described() -> None:
    """Every one of the 39 styles, the 9 held out of training among them, and each body the
    one its record's digest names."""
    styles = {style: held_out for style, held_out, _, _ in _corpus()}
    assert (len(_corpus()), len(styles), sum(styles.values())) == (48, 39, 9)
    for style, _, record, body in _corpus():
        assert hashlib.sha256(body).hexdigest() == record.sha256, style


@pytest.mark.parametrize("state", ["C", "U"])
def test_values_made_with_dictionary_1_read_back_as_written(state: str) -> None:
    """Each answer of the corpus, compressed with dictionary 1 and unpacked by the codec of
    every dictionary shipped, to the answer packed (its time to the millisecond the format
    keeps)."""
    codec = Codec(shipped())
    for style, _, record, body in _corpus():
        value = _with_dictionary_1(state, record, body)
        found = layout.fields(value)
        assert found is not None, style
        assert (value[found.codec_at], found.lost) == (1, LOST if state == "U" else b""), style
        unpacked, read = codec.unpack(value)
        assert read == body, style
        assert (unpacked.status, unpacked.reason, unpacked.headers) == (
            record.status,
            record.reason,
            record.headers,
        ), style
        assert (unpacked.size, unpacked.blob, unpacked.extra) == (len(body), None, {}), style
        assert unpacked.completed_at == stored_ms(record) / 1000, style
        assert unpacked.unknown == (state == "U"), style


def test_the_corpus_compresses_with_dictionary_1_as_recorded() -> None:
    """Each answer smaller compressed than packed, and all of them together the size
    recorded: a changed dictionary, codec level or parameter shows here."""
    total = 0
    for style, _, record, body in _corpus():
        packed = pack_answer(record, body)
        value = _with_dictionary_1("C", record, body)
        frame = value[layout.IDENTITY + 1 : -layout.CHECKSUM]  # past the codec byte
        assert len(frame) < len(packed), style
        total += len(frame)
    if zstandard.ZSTD_VERSION == COMPRESSED_BY:
        assert total == COMPRESSED
    else:
        assert abs(total - COMPRESSED) <= COMPRESSED // 100, zstandard.ZSTD_VERSION
