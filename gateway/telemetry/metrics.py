"""Prometheus metrics of one gateway process."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.store import breaker as b
from gateway.telemetry.requestlog import current

# Outcomes of a request, as counted in idem_requests_total{outcome}.
FORWARDED: Final = "forwarded"  # claimed and sent upstream
REPLAYED: Final = "replayed"  # answered from the record
FOLLOWED: Final = (
    "followed"  # a duplicate that followed the answer in flight (on_in_flight: follow)
)
CONFLICT: Final = "conflict"  # 409: in flight elsewhere
MISMATCH: Final = "mismatch"  # 422: same key, other payload
REJECTED: Final = "rejected"  # 400/413: bad request, nothing stored
BYPASSED: Final = "bypassed"  # Redis down and fail_mode: open
UNPROTECTED: Final = "unprotected"  # method or path not protected
SHADOWED: Final = "shadowed"  # shadow mode: forwarded untouched where enforce would not have
ERROR: Final = "error"  # 503 (Redis down, closed) or 502/504 from the upstream call

# idem_circuit_state values.
CIRCUIT_STATES: Final[dict[str, int]] = {b.CLOSED: 0, b.HALF_OPEN: 1, b.OPEN: 2}
# Overhead buckets: the gateway's own time is sub-millisecond to a few ms.
# Not Final: mypyc may read a Final tuple of floats as never set (tests/test_compilable.py).
OVERHEAD_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    """The gateway's counters and histograms, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._children: dict[tuple[Any, ...], Any] = {}
        r = self.registry
        self.requests = Counter(
            "idem_requests",
            "Requests by route, method and outcome",
            ["route", "method", "outcome"],
            registry=r,
        )
        self.shadow = Counter(
            "idem_shadow_decisions",
            "Shadow mode: what enforce mode would have answered",
            ["route", "would"],
            registry=r,
        )
        self.lease_lost = Counter(
            "idem_lease_lost",
            "Claims whose lease was lost before the outcome was stored",
            ["route"],
            registry=r,
        )
        self.lease_extensions = Counter(
            "idem_lease_extensions", "Leases renewed while the upstream call ran", registry=r
        )
        self.redis_errors = Counter(
            "idem_redis_errors",
            "Redis calls that failed or were refused by the breaker",
            registry=r,
        )
        self.unknown_outcomes = Counter(
            "idem_unknown_outcomes",
            "Upstream calls sent whose outcome is unknown",
            ["route", "mode"],
            registry=r,
        )
        self.blob_errors = Counter(
            "idem_blob_errors",
            "Blob-store failures by reason: missing, corrupt, unavailable, write",
            ["route", "reason"],
            registry=r,
        )
        self.upstream_seconds = Histogram(
            "idem_upstream_seconds",
            "Upstream call time, head to last byte",
            ["route"],
            registry=r,
        )
        self.overhead_seconds = Histogram(
            "idem_overhead_seconds",
            "Time spent in the gateway itself: handling minus upstream",
            ["route"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.circuit = Gauge(
            "idem_circuit_state",
            "Redis circuit breaker: 0 closed, 1 half-open, 2 open",
            registry=r,
        )
        self.outcomes_unstored = Counter(
            "idem_outcomes_unstored",
            "Outcomes that ran upstream that Redis did not take at "
            "once: journaled and stored in the background",
            ["route"],
            registry=r,
        )
        self.fenced = Counter(
            "idem_fenced_completions",
            "Outcomes not stored because a newer claim holds the key",
            ["route"],
            registry=r,
        )
        self.in_flight = Gauge(
            "idem_in_flight",
            "Claimed requests being forwarded, and outcomes being stored in the background",
            registry=r,
        )
        self.reconciled = Counter(
            "idem_reconciled",
            "Unknown outcomes the reconcile lookup settled, by what it said: happened "
            "(recorded), not_happened (released) or unclear (on_unknown_outcome)",
            ["route", "result"],
            registry=r,
        )
        self.owner_lost = Counter(
            "idem_owner_lost",
            "Keys found with a lost owner (its lease ended unrenewed), by resolution: "
            "reconciled, not_happened, rerun, held, kept, unsent, late_answer",
            ["route", "resolution"],
            registry=r,
        )
        self.followers = Gauge(
            "idem_followers",
            "Duplicates following an answer in flight on this gateway (on_in_flight: follow)",
            ["route"],
            registry=r,
        )
        self.followed = Counter(
            "idem_followed",
            "Duplicates that followed an answer in flight, by how they ended: whole (the "
            "recorded answer), cut (none whole), waited (answered as on_in_flight: wait "
            "answers: no owner told them, or 409 over max_followers)",
            ["route", "ended"],
            registry=r,
        )
        self.journal_depth = Gauge(
            "idem_journal_depth", "Journaled outcomes that Redis has not taken yet", registry=r
        )
        self.journal_replayed = Counter(
            "idem_journal_replayed",
            "Outcomes replayed from the journals of earlier gateways",
            registry=r,
        )
        self.record_format = Gauge(
            "idem_record_format",
            "The format this process writes records in: 1, or 2 once no gateway of an "
            "earlier release is seen (redis.record_format)",
            registry=r,
        )
        self.eviction_risk = Gauge(
            "idem_redis_eviction_risk",
            "1 when Redis's maxmemory-policy may evict our keys",
            registry=r,
        )
        self.client_connections = Gauge(
            "idem_client_connections", "Client connections open now", registry=r
        )
        self.client_connections_cut = Counter(
            "idem_client_connections_cut",
            "Client connections closed by a limit: max-connections (answered 503), "
            "header-timeout, write-timeout",
            ["reason"],
            registry=r,
        )
        self.certificate_expiry = Gauge(
            "idem_listener_certificate_expiry_timestamp_seconds",
            "When the certificate a TLS listener shows new connections expires (Unix time)",
            ["listener"],
            registry=r,
        )
        self.blob_written = Counter(
            "idem_blob_written_bytes", "Body bytes written to the blob store", registry=r
        )
        self.blob_read = Counter(
            "idem_blob_read_bytes", "Body bytes read back from the blob store", registry=r
        )

    def request(self, route: str, method: str, outcome: str) -> None:
        self._child(self.requests, route, method, outcome).inc()
        info = current()
        if info is not None:
            info.route, info.outcome = route, outcome

    def upstream(self, route: str, seconds: float) -> None:
        self._child(self.upstream_seconds, route).observe(seconds)
        info = current()
        if info is not None:
            info.upstream_seconds += seconds

    def overhead(self, route: str, seconds: float) -> None:
        self._child(self.overhead_seconds, route).observe(seconds)

    def would(self, route: str, outcome: str) -> None:
        """Shadow mode: enforce would have answered `outcome` (replayed, conflict, ...)."""
        self._child(self.shadow, route, outcome).inc()
        info = current()
        if info is not None:
            info.would = outcome

    def watch_routes(self, routes: Callable[[], Iterable[tuple[str, str, str]]]) -> None:
        """Read the configured routes (name, mode, fail_mode) at each scrape: a route with no
        traffic yet is listed too, and a reload shows at once."""
        self.registry.register(_Routes(routes))

    def watch_circuit(self, breaker: b.Circuit) -> None:
        """Read the breaker's state at each scrape (the worst node's, for a Cluster)."""
        self.circuit.set_function(lambda: CIRCUIT_STATES[breaker.state])

    def watch_connections(self, count: Callable[[], int]) -> None:
        """Read the number of open client connections at each scrape."""
        self.client_connections.set_function(count)

    def watch_certificate(self, listener: str, expires: Callable[[], float]) -> None:
        """Read a TLS listener's certificate expiry at each scrape (it changes on reload)."""
        self.certificate_expiry.labels(listener).set_function(expires)

    def connection_cut(self, reason: str) -> None:
        self._child(self.client_connections_cut, reason).inc()

    def watch_in_flight(self, running: Callable[[], int]) -> None:
        """Read the number of running forwards and background stores at each scrape."""
        self.in_flight.set_function(running)

    def watch_record_format(self, written: Callable[[], int]) -> None:
        """Read the record format written at each scrape (a sighting changes it)."""
        self.record_format.set_function(written)

    def watch_journal(self, depth: Callable[[], int]) -> None:
        """Read the journal's depth at each scrape."""
        self.journal_depth.set_function(depth)

    def _child(self, metric: Any, *labels: str) -> Any:
        # labels() takes a lock and builds a key on every call: keep the children it gives.
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child


class _Routes(Collector):
    def __init__(self, routes: Callable[[], Iterable[tuple[str, str, str]]]) -> None:
        self.routes = routes

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "idem_route_info",
            "The configured routes: 1 for each, with its mode and fail_mode",
            labels=["route", "mode", "fail_mode"],
        )
        for name, mode, fail_mode in self.routes():
            info.add_metric([name, mode, fail_mode], 1.0)
        yield info
