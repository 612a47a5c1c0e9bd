"""`testkit.ports.free_port`: ports no other server's bind(0) or client connection can take
between the pick and the bind (below the kernel's ephemeral range), each xdist worker in a
slice of its own, a port in use skipped."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from testkit import ports

PICKS = (
    "import json; from testkit import ports; "
    "print(json.dumps([ports._ephemeral_start(), [ports.free_port() for _ in range(50)]]))"
)


def picks_of(worker: str, count: int) -> tuple[int, list[int]]:
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": str(count)}
    done = subprocess.run(
        [sys.executable, "-c", PICKS], env=env, capture_output=True, text=True, check=True
    )
    start, picked = json.loads(done.stdout)
    return start, picked


def test_each_worker_picks_below_the_ephemeral_range_in_a_slice_of_its_own() -> None:
    seen: list[set[int]] = []
    for index in range(4):
        start, picked = picks_of(f"gw{index}", 4)
        size = (start - ports.FIRST) // 4
        low = ports.FIRST + index * size
        assert all(low <= port < low + size for port in picked)
        assert len(set(picked)) == 50, "a port given twice"
        seen.append(set(picked))
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])


def test_a_port_in_use_is_skipped() -> None:
    first = ports.free_port()
    taken = ports._FIRST_OF_SLICE + (first + 1 - ports._FIRST_OF_SLICE) % ports._SLICE
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        following = ports.free_port()
    assert following != taken
    assert following == ports._FIRST_OF_SLICE + (taken + 1 - ports._FIRST_OF_SLICE) % ports._SLICE
