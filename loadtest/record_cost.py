"""What a record and a claim result cost to build, on the build that runs.

`python -m loadtest.record_cost` times, in this process, best of five runs: a `Record` built
as a completion builds it (eight headers), the same record's metadata decoded as a replay's
claim decodes it, and the `ClaimResult` that claim answers with. It prints which build ran
(`IDEM_PURE=1` loads a compiled checkout as Python).
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

from gateway import build
from gateway.core.claims import Claim, ClaimResult
from gateway.core.record import Record
from loadtest.script_cost import HEADERS  # a typical answer's eight headers

N = 100_000
SHA256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"


def built() -> Record:
    return Record(
        status=201,
        headers=HEADERS,
        size=156,
        sha256=SHA256,
        blob=None,
        completed_at=1.79e9,
        extra={},
        reason="Created",
    )


METADATA = built().encode()
RECORD = Record.decode(METADATA)


def per_call_ns(call: Callable[[], object]) -> float:
    return min(timeit.repeat(call, number=N, repeat=5)) / N * 1e9


def main() -> None:
    print(f"build: {build.kind()}")
    rows = {
        "Record(...), as a completion builds it": built,
        f"Record.decode, {len(METADATA)} bytes of metadata": lambda: Record.decode(METADATA),
        "ClaimResult(DONE, ...), as a replay's claim": lambda: ClaimResult(
            Claim.DONE, pttl_ms=86_400_000, record=RECORD, body=b"{}"
        ),
    }
    for name, call in rows.items():
        print(f"{name}: {per_call_ns(call):.0f} ns")


if __name__ == "__main__":
    main()
