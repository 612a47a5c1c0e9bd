"""What a route's dictionary may learn from its answers: only what many of them share.

A dictionary is trained on a route's answers (`store.trained`), and it outlives each of them.
Before training, every run of letters and digits in the samples keeps only its longest prefix
that at least KEEP of the samples hold (a header value, a JSON member's name, the first digits
of a time); the rest of it (an id, an amount, a name, an address: what one caller's answers
hold) is replaced by random characters of its kind, so that the dictionary learns the shape
of the answers and none of their particulars.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Final

KEEP: Final = 10  # samples that must hold a run of characters for it to be learnt
_RUN: Final = re.compile(rb"[A-Za-z0-9]+")
_HEX: Final = frozenset(b"0123456789abcdef")
_KINDS: Final = (
    (frozenset(string.digits.encode()), string.digits.encode()),
    (frozenset(string.ascii_lowercase.encode()), string.ascii_lowercase.encode()),
    (frozenset(string.ascii_uppercase.encode()), string.ascii_uppercase.encode()),
)


def redacted(samples: Sequence[bytes], keep: int = KEEP) -> list[bytes]:
    """The samples, each run of letters and digits cut to its longest prefix that `keep` of
    them hold and filled up with random characters of the same kinds (hex stays hex)."""
    held: Counter[bytes] = Counter()
    for sample in samples:
        prefixes: set[bytes] = set()
        for run in _RUN.findall(sample):
            prefixes.update(run[:length] for length in range(1, len(run) + 1))
        held.update(prefixes)
    noise = random.SystemRandom()

    def cut(found: re.Match[bytes]) -> bytes:
        run = found.group()
        length = len(run)
        while length and held[run[:length]] < keep:
            length -= 1
        return run if length == len(run) else run[:length] + _filled(run[length:], noise)

    return [_RUN.sub(cut, sample) for sample in samples]


def _filled(run: bytes, noise: random.Random) -> bytes:
    """Random characters in place of `run`'s, each of its kind (all of them hex: hex)."""
    if _HEX.issuperset(run):
        return bytes(noise.choice(b"0123456789abcdef") for _ in run)
    out = bytearray()
    for byte in run:
        alphabet = next(choices for kind, choices in _KINDS if byte in kind)
        out.append(noise.choice(alphabet))
    return bytes(out)
