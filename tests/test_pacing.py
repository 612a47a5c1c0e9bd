"""Asking again: the pauses between tries, growing, and none past the deadline."""

from __future__ import annotations

import time

from gateway.http.flow.pacing import Pacing


async def test_no_pause_is_taken_once_the_time_is_up() -> None:
    pacing = Pacing((10.0, 10.0), within=0.0)
    started = time.monotonic()
    assert await pacing.pause() is False
    assert time.monotonic() - started < 5.0  # not the ten seconds asked for


async def test_pauses_end_at_the_deadline_and_not_before() -> None:
    """Pauses of 10, 20, 20 ms fill 50 ms: the last one may be cut short, none goes past."""
    pacing = Pacing((0.01, 0.02), within=0.05)
    started = time.monotonic()
    pauses = 0
    while await pacing.pause():
        pauses += 1
    assert time.monotonic() - started >= 0.05
    assert 1 <= pauses <= 4  # fewer when the machine is slow to wake the loop
