"""What the per-request log line costs, on and off.

`python -m loadtest.logging_cost` times, in this process, the work the access middleware adds
to one request when `gateway.access` logs at info (building the fields, hashing the key,
formatting and writing one JSON line) and when it does not (one level check).
"""

from __future__ import annotations

import io
import logging
import timeit

from gateway.core.keys import digest, parse_key
from gateway.telemetry.logs import FIELDS, JsonFormatter

N = 20_000


def per_call_us(fn: object, number: int = N) -> float:
    return timeit.timeit(fn, number=number) / number * 1e6  # type: ignore[arg-type]


def main() -> None:
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("gateway.http.server.access")
    log.handlers[:] = [handler]
    log.propagate = False

    def line() -> None:
        if log.isEnabledFor(logging.INFO):
            fields = {
                "request_id": "19b8f7ad5ef44fbaa1f59fc71abc3038", "method": "POST",
                "path": "/payments", "route": "payments",
                "key_hash": digest(parse_key(["order-1001"]) or ""), "outcome": "forwarded",
                "status": 201, "duration_ms": 6.984, "upstream_ms": 1.91,
            }  # fmt: skip
            log.info("request", extra={FIELDS: fields})

    log.setLevel(logging.INFO)
    on = per_call_us(line)
    log.setLevel(logging.WARNING)
    off = per_call_us(line)
    print(f"request log line at info: {on:.1f} us; with log_level warning: {off:.2f} us")


if __name__ == "__main__":
    main()
