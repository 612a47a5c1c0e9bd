"""What this process holds that a person may need to look at: calls still running (a call
that outlives its route's lease is worth a look). Kept in memory, per process: the console
asks every worker (the journal says which outcomes Redis has not taken yet)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class Watch:
    calls: dict[str, tuple[str, float]] = field(default_factory=dict)  # record -> route, since

    def calling(self, record: str, route: str) -> None:
        self.calls[record] = (route, time.time())

    def called(self, record: str) -> None:
        self.calls.pop(record, None)

    def overdue(self, leases: dict[str, float]) -> list[tuple[str, str, float]]:
        """(route, record, since) of the calls running longer than their route's lease."""
        now = time.time()
        return [
            (route, record, since)
            for record, (route, since) in self.calls.items()
            if now - since > leases.get(route, float("inf"))
        ]
