"""Telling clients how long their key is kept: the `Idempotency-Expires` header."""

from __future__ import annotations

import functools
import time
from email.utils import formatdate
from typing import Final

EXPIRES: Final = "Idempotency-Expires"


def expires(seconds_left: float) -> dict[str, str]:
    """`{EXPIRES: <HTTP-date>}` for a key kept `seconds_left` more; {} when it never expires."""
    if seconds_left <= 0:
        return {}
    return {EXPIRES: _http_date(int(time.time() + seconds_left))}


@functools.lru_cache(maxsize=64)
def _http_date(second: int) -> str:
    # An HTTP-date has whole seconds; formatting one costs more than the rest of the header.
    return formatdate(second, usegmt=True)
