"""Telling clients how long their key is kept: the `Idempotency-Expires` header."""

from __future__ import annotations

import time
from email.utils import formatdate

EXPIRES = "Idempotency-Expires"


def expires(seconds_left: float) -> dict[str, str]:
    """`{EXPIRES: <HTTP-date>}` for a key kept `seconds_left` more; {} when it never expires."""
    if seconds_left <= 0:
        return {}
    return {EXPIRES: formatdate(time.time() + seconds_left, usegmt=True)}
