"""Asking again: each loop's pauses drawn within its bounds, none past the deadline, and
loops started together apart from their first pause on."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.core import backoff
from gateway.core.backoff import Backoff
from gateway.http.flow.pacing import Pacing

# Every loop's backoff, by its name in gateway.core.backoff.
LOOPS = {name: value for name, value in vars(backoff).items() if isinstance(value, Backoff)}


def test_every_retry_loop_of_the_gateway_has_its_backoff_here() -> None:
    assert set(LOOPS) == {
        "IN_FLIGHT_WAIT", "GIVE_BACK", "STORE_AGAIN", "LATE_ANSWER", "CLUSTER_TRY_AGAIN",
        "SENTINEL_LISTEN", "WORKER_START", "EMBEDDED_START",
    }  # fmt: skip
    assert all(0 < each.first <= each.longest for each in LOOPS.values())


def test_the_late_answer_wait_covers_three_tries_of_an_owner_storing_its_answer() -> None:
    """docs/production.md: the owner stores it every 0.5 s at most, the retry waits 1.5 s."""
    assert backoff.STORE_AGAIN.longest == 0.5
    assert backoff.LATE_ANSWER.within == 1.5


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_each_pause_is_drawn_from_the_first_to_three_times_the_last_and_never_past_the_longest(
    name: str,
) -> None:
    bounds = LOOPS[name]
    for _ in range(200):
        pauses, last = bounds.pauses(), bounds.first
        for _ in range(12):
            pause = pauses.next()
            assert bounds.first <= pause <= min(bounds.longest, 3 * last), (name, pause, last)
            last = pause


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_loops_started_together_part_at_their_first_pause_and_stay_apart(name: str) -> None:
    """Twenty loops of one kind started at one moment (every gateway of a fleet after a
    failover): their k-th tries spread over at least half a first pause, at every k. Pauses
    that only double put each try of all twenty at the very same moment."""
    bounds = LOOPS[name]
    runs = [bounds.pauses() for _ in range(20)]
    tries = [0.0] * len(runs)
    for _ in range(8):
        tries = [at + run.next() for at, run in zip(tries, runs, strict=True)]
        assert max(tries) - min(tries) >= bounds.first / 2, (name, tries)


async def test_two_waiting_loops_started_together_do_not_ask_in_step() -> None:
    """Two duplicates waiting for one request in flight (`on_in_flight: wait`), started in
    the same loop turn: the moments each asks Redis again differ at every try."""
    tries: list[list[float]] = [[], []]

    async def waiting(times: list[float]) -> None:
        pacing = Pacing(backoff.IN_FLIGHT_WAIT, within=2.0)
        while await pacing.pause() and len(times) < 5:
            times.append(time.monotonic())

    await asyncio.gather(waiting(tries[0]), waiting(tries[1]))
    assert len(tries[0]) == len(tries[1]) == 5
    # Two tries woken in one turn of the loop are microseconds apart; drawn apart, they are
    # at least a few milliseconds apart but by a chance under one in ten thousand.
    assert max(abs(a - b) for a, b in zip(*tries, strict=True)) > 0.002, tries


async def test_no_pause_is_taken_once_the_time_is_up() -> None:
    pacing = Pacing(Backoff(10.0, 10.0), within=0.0)
    started = time.monotonic()
    assert await pacing.pause() is False
    assert time.monotonic() - started < 5.0  # not the ten seconds asked for


async def test_pauses_end_at_the_deadline_and_not_before() -> None:
    """Pauses of 10 to 30 ms fill 50 ms: the last one may be cut short, none goes past."""
    pacing = Pacing(Backoff(0.01, 0.03), within=0.05)
    started = time.monotonic()
    pauses = 0
    while await pacing.pause():
        pauses += 1
    assert time.monotonic() - started >= 0.05
    assert 1 <= pauses <= 5  # fewer when the machine is slow to wake the loop


async def test_a_backoff_with_a_window_of_its_own_ends_there() -> None:
    pacing = Pacing(Backoff(0.01, 0.02, within=0.03))
    started = time.monotonic()
    while await pacing.pause():
        pass
    assert 0.03 <= time.monotonic() - started < 2.0
