"""Prometheus metrics of one gateway process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Outcomes of a request, as counted in idem_requests_total{outcome}.
FORWARDED = "forwarded"  # claimed and sent upstream
REPLAYED = "replayed"  # answered from the record
CONFLICT = "conflict"  # 409: in flight elsewhere
MISMATCH = "mismatch"  # 422: same key, other payload
REJECTED = "rejected"  # 400/413: bad request, nothing stored
BYPASSED = "bypassed"  # Redis down and fail_mode: open
UNPROTECTED = "unprotected"  # method or path not protected
ERROR = "error"  # 503 (Redis down, closed) or 502/504 from the upstream call


class Metrics:
    """The gateway's counters and histograms, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "idem_requests", "Requests by route, method and outcome",
            ["route", "method", "outcome"], registry=r,
        )  # fmt: skip
        self.lease_lost = Counter(
            "idem_lease_lost", "Claims whose lease was lost before the outcome was stored",
            ["route"], registry=r,
        )  # fmt: skip
        self.lease_extensions = Counter(
            "idem_lease_extensions", "Leases renewed while the upstream call ran", registry=r
        )
        self.redis_errors = Counter(
            "idem_redis_errors", "Redis calls that failed or were refused by the breaker",
            registry=r,
        )  # fmt: skip
        self.unknown_outcomes = Counter(
            "idem_unknown_outcomes", "Upstream calls sent whose outcome is unknown",
            ["route", "mode"], registry=r,
        )  # fmt: skip
        self.upstream_seconds = Histogram(
            "idem_upstream_seconds", "Upstream call time, head to last byte", ["route"],
            registry=r,
        )  # fmt: skip

    def request(self, route: str, method: str, outcome: str) -> None:
        self.requests.labels(route, method, outcome).inc()
