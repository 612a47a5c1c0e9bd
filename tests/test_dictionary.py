"""The dictionaries of format-2 records: each is the one `python -m loadtest.dictionary` makes
from its defaults, none changes once shipped, and values made with them read back as written."""

from __future__ import annotations

import hashlib

import pytest
import zstandard

from gateway.core.compact import Codec, pack_answer
from gateway.store.dictionaries import shipped
from loadtest.dictionary import training
from loadtest.dictionary.corpus import answers
from loadtest.dictionary.styles import STYLES

# Every dictionary shipped, by number, and its SHA-256: stored records need those exact bytes.
SHIPPED = {1: "ec819435253eece80b87110c777be82df2591e140f5bad6dc243b2f31d161425"}
# The zstd each was trained by: another release's training may make other bytes.
TRAINED_BY = {1: (1, 5, 7)}


def test_the_dictionaries_shipped_are_the_ones_recorded() -> None:
    """A number once shipped is never reused or changed: a new dictionary is a new number,
    recorded here."""
    digests = {number: hashlib.sha256(data).hexdigest() for number, data in shipped().items()}
    assert digests == SHIPPED


def test_dictionary_1_is_what_the_builder_makes_from_its_defaults() -> None:
    """The corpus drawn anew from the default seed, trained again: the same bytes."""
    trained_by, running = (".".join(map(str, v)) for v in (TRAINED_BY[1], zstandard.ZSTD_VERSION))
    if trained_by != running:
        pytest.skip(f"dictionary 1 was trained by zstd {trained_by}, this is {running}")
    assert training.build() == shipped()[1]


def _codec_byte(value: bytes) -> int:
    at = 3 + value[2]  # past the version, state and fingerprint
    for _ in range(2):  # the owner's token, the lost owner's
        at += 1 + value[at]
    return value[at]


@pytest.mark.parametrize("state", ["C", "U"])
def test_values_made_with_dictionary_1_read_back_as_written(state: str) -> None:
    """Answers of every style, the held-out ones too: each compressed with dictionary 1, and
    unpacked to the answer packed (its time to the millisecond the format keeps)."""
    codec = Codec(shipped())
    sample = answers(STYLES, 400, training.SEED + 7)
    assert {answer.style for answer in sample} == {style.name for style in STYLES}
    for answer in sample:
        record = answer.record
        value = codec.pack(state, bytes(16), "7" * 32, pack_answer(record, answer.body))
        assert _codec_byte(value) == 1, answer.style
        unpacked, body = codec.unpack(value)
        assert body == answer.body
        assert (unpacked.status, unpacked.reason, unpacked.headers) == (
            record.status,
            record.reason,
            record.headers,
        )
        assert (unpacked.size, unpacked.blob, unpacked.extra) == (len(body), None, {})
        assert unpacked.completed_at == round(record.completed_at * 1000) / 1000
        assert unpacked.unknown == (state == "U")
