"""What a request's fingerprint costs, by mode.

`python -m loadtest.fingerprint_cost` times, in this process, the fingerprint of one payment
request (a 156-byte JSON body) in `body` mode (raw bytes) and in `json` mode (canonical JSON:
member order and white space ignored, numbers compared as written), best of five runs.
"""

from __future__ import annotations

import timeit

from gateway.config.policy import Fingerprint
from gateway.core.fingerprint import fingerprint

N = 20_000
BODY = (
    b'{"amount": 100, "currency": "EUR", "customer": {"id": "cus_123", "email": "a@b.c"}, '
    b'"items": [{"sku": "x1", "qty": 2, "price": 12.5}], "note": "order 1001"}'
)


def per_call_us(mode: str) -> float:
    spec = Fingerprint(mode=mode)
    runs = timeit.repeat(
        lambda: fingerprint(spec, "POST", "/payments", "", {}, BODY), number=N, repeat=5
    )
    return min(runs) / N * 1e6


def main() -> None:
    for mode in ("body", "json"):
        print(f"fingerprint, mode {mode}, {len(BODY)}-byte body: {per_call_us(mode):.1f} us")


if __name__ == "__main__":
    main()
