"""Training the dictionary from the corpus, and measuring dictionaries on answers.

Training is zstd's fastCover with its parameters fixed (`K`, `D`), on every sample
(`split_point=1.0`: with the default 0.75 the last quarter of the corpus would only test the
parameters, and with none fixed zstd would search them, in threads): one run, one result, the
same bytes for the same corpus and zstd. The dictionary's id is zstd's own, a hash of its
content; format-2 frames do not carry it (the codec byte names the dictionary).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import zstandard

from gateway.core.compact import LEVEL, Codec

from .corpus import Answer, answers
from .styles import HELD_OUT, STYLES, TRAINED

SEED = 1
CORPUS = 8_000  # answers trained on: about 9 MB packed, some 140 times the dictionary
KIB = 64  # the size shipped: see the package's docstring
K, D = 512, 6  # fastCover's segment and d-mer sizes (chosen on held-out answers)

# The format-2 value's parts around the compressed answer, as the gateway writes them: the
# version, state and fingerprint (16 bytes), an owner's token (32 hex), the empty lost owner's
# token, the codec byte and the CRC-32.
FINGERPRINT = bytes(16)
TOKEN = "0" * 32
AROUND = 3 + len(FINGERPRINT) + 1 + len(TOKEN) + 1 + 1 + 4  # 58 bytes


def samples(size: int = CORPUS, seed: int = SEED) -> list[bytes]:
    """The packed answers dictionaries are trained on: the styles not held out."""
    return [answer.packed() for answer in answers(TRAINED, size, seed)]


def train(trained_on: Sequence[bytes], kib: int = KIB) -> bytes:
    """A dictionary of `kib` KiB trained on `trained_on`, always the same for the same input."""
    trained = zstandard.train_dictionary(
        kib * 1024, list(trained_on), k=K, d=D, split_point=1.0, level=LEVEL
    )
    return trained.as_bytes()


def build(size: int = CORPUS, seed: int = SEED, kib: int = KIB) -> bytes:
    """The dictionary `--out` writes: with the defaults, the one shipped as number 1."""
    return train(samples(size, seed), kib)


def measured_answers(count: int, seed: int = SEED) -> list[Answer]:
    """Answers of every style drawn anew (from `seed` + 1), by the deployments of `seed`:
    those of the trained styles are the APIs training saw, the held-out ones never seen."""
    return answers(STYLES, count, seed + 1, houses_seed=seed)


@dataclass(frozen=True)
class Sizes:
    """Mean sizes of one style's answers: packed, and per dictionary (by name) the whole
    format-2 value and its compressed answer alone."""

    style: str
    held_out: bool
    count: int
    packed: float
    value: dict[str, float]
    compressed: dict[str, float]


def _plain() -> zstandard.ZstdCompressor:
    """zstd as the codec runs it, without a dictionary: the baseline."""
    params = zstandard.ZstdCompressionParameters.from_level(
        LEVEL,
        format=zstandard.FORMAT_ZSTD1_MAGICLESS,
        write_content_size=1,
        write_checksum=0,
        write_dict_id=0,
    )
    return zstandard.ZstdCompressor(compression_params=params)


def measure(dictionaries: Mapping[str, bytes], measured: Iterable[Answer]) -> list[Sizes]:
    """Per style, the sizes of its answers with each of `dictionaries`, and with none
    ("zstd": the value the codec would make if it compressed without a dictionary)."""
    codecs = {name: Codec({1: data}) for name, data in dictionaries.items()}
    plain = _plain()
    by_style: dict[str, list[Answer]] = {}
    for answer in measured:
        by_style.setdefault(answer.style, []).append(answer)
    out = []
    for style, group in sorted(by_style.items()):
        packed = [answer.packed() for answer in group]
        parts = {"zstd": [min(len(plain.compress(each)), len(each)) for each in packed]}
        for name, codec in codecs.items():
            parts[name] = [
                len(codec.pack("C", FINGERPRINT, TOKEN, each)) - AROUND for each in packed
            ]
        out.append(
            Sizes(
                style=style,
                held_out=style in HELD_OUT,
                count=len(group),
                packed=statistics.mean(map(len, packed)),
                value={name: AROUND + statistics.mean(each) for name, each in parts.items()},
                compressed={name: statistics.mean(each) for name, each in parts.items()},
            )
        )
    return out


def summary(sizes: Sequence[Sizes], held_out: bool) -> dict[str, float]:
    """The mean over the styles (each style counting once) of the held-out or held-in ones:
    "packed", and per dictionary "NAME value" and "NAME compressed"."""
    chosen = [each for each in sizes if each.held_out == held_out]
    out = {"packed": statistics.mean(each.packed for each in chosen)}
    for name in chosen[0].value:
        out[f"{name} value"] = statistics.mean(each.value[name] for each in chosen)
        out[f"{name} compressed"] = statistics.mean(each.compressed[name] for each in chosen)
    return out
