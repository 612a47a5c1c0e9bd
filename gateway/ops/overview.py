"""What the console's overview shows, read from the gateway's own metrics and readiness: the
same numbers `/metrics` gives, so that the page and a Prometheus board never disagree."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

from prometheus_client.metrics_core import Metric

from gateway import build
from gateway.telemetry import metrics as m

# The outcomes the overview counts per route, in the order the page shows them: every kind
# of traffic, those sent upstream without idempotency (bypassed, shadowed, passed through)
# among them.
OUTCOMES: Final = (
    m.FORWARDED,
    m.REPLAYED,
    m.FOLLOWED,
    m.BYPASSED,
    m.SHADOWED,
    m.UNPROTECTED,
    m.CONFLICT,
    m.MISMATCH,
    m.REJECTED,
    m.ERROR,
)
CIRCUIT_NAMES: Final = {value: name for name, value in m.CIRCUIT_STATES.items()}


def version() -> dict[str, str]:
    """The installed version, and whether this build is compiled (mypyc) or pure Python."""
    return {"version": build.version(), "build": build.kind()}


def overview(families: Iterable[Metric], workers: list[dict[str, Any]]) -> dict[str, Any]:
    """The overview document: `families` are the gateway's metrics (a `--workers` gateway's
    merged ones), `workers` each worker's readiness answer (with its `worker` and `pid`)."""
    families = list(families)
    routes: dict[str, dict[str, Any]] = {}
    for labels, _ in samples(families, "idem_route_info"):  # listed before any traffic
        entry = routes.setdefault(labels["route"], _route())
        entry["mode"], entry["fail_mode"] = labels["mode"], labels["fail_mode"]
    for labels, value in samples(families, "idem_requests_total"):
        outcome = labels.get("outcome", "")
        counts = routes.setdefault(labels["route"], _route())["counts"]
        if outcome in counts:
            counts[outcome] += value
    for labels, value in samples(families, "idem_followers"):  # each worker's, added up
        routes.setdefault(labels["route"], _route())["followers"] += value
    for kind, name in (
        ("overhead", "idem_overhead_seconds"),
        ("upstream", "idem_upstream_seconds"),
    ):
        for route, by_bound in _buckets(families, name + "_bucket").items():
            entry = routes.setdefault(route, _route())
            entry[kind + "_p50_ms"] = quantile(0.5, by_bound)[0]
            entry[kind + "_p99_ms"], entry[kind + "_p99_beyond"] = quantile(0.99, by_bound)
    circuit = max((v for _, v in samples(families, "idem_circuit_state")), default=0.0)
    risk = max((v for _, v in samples(families, "idem_redis_eviction_risk")), default=0.0)
    served: dict[str, float] = {}  # answers by worker (a single process is worker 0)
    for labels, value in samples(families, "idem_requests_total"):
        worker = labels.get("worker", "0")
        served[worker] = served.get(worker, 0.0) + value
    workers = [{**w, "requests": served.get(str(w["worker"]), 0.0)} for w in workers]
    up = [w for w in workers if w.get("up")]
    return {
        **version(),
        "time": time.time(),
        "routes": dict(sorted(routes.items())),
        "redis": {
            "reachable": bool(up) and all(w.get("redis") for w in up),
            "circuit": CIRCUIT_NAMES.get(int(circuit), "unknown"),
            "eviction_risk": bool(risk),
        },
        "journal_depth": int(sum(v for _, v in samples(families, "idem_journal_depth"))),
        "in_flight": int(sum(v for _, v in samples(families, "idem_in_flight"))),
        "workers": {"up": len(up), "expected": len(workers), "list": workers},
    }


def _route() -> dict[str, Any]:
    """A route's entry; `mode` and `fail_mode` None for one no longer configured."""
    entry: dict[str, Any] = {"counts": dict.fromkeys(OUTCOMES, 0.0), "mode": None}
    entry["fail_mode"] = None
    entry["followers"] = 0.0  # duplicates following an answer in flight now
    for kind in ("overhead", "upstream"):
        entry |= {kind + "_p50_ms": None, kind + "_p99_ms": None, kind + "_p99_beyond": False}
    return entry


def _buckets(families: list[Metric], name: str) -> dict[str, dict[float, float]]:
    """A histogram's cumulative buckets by route, its workers' added up."""
    found: dict[str, dict[float, float]] = {}
    for labels, value in samples(families, name):
        route_buckets = found.setdefault(labels["route"], {})
        bound = float(labels["le"])
        route_buckets[bound] = route_buckets.get(bound, 0.0) + value
    return found


def samples(families: Iterable[Metric], name: str) -> Iterator[tuple[dict[str, str], float]]:
    """The labels and value of each sample called `name`."""
    for family in families:
        for s in family.samples:
            if s.name == name:
                yield s.labels, s.value


def quantile(q: float, cumulative: dict[float, float]) -> tuple[float | None, bool]:
    """As Prometheus's histogram_quantile: linear within the bucket that holds the rank; in
    milliseconds, None before any observation. True when the rank is past the last finite
    bucket: the value is then its bound, and the quantile only known to be above it."""
    bounds = sorted(cumulative)
    total = cumulative.get(float("inf"), 0.0)
    if total <= 0:
        return None, False
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if bound == float("inf"):
                return round(lower * 1000, 3), True
            share = (rank - below) / (count - below) if count > below else 1.0
            return round((lower + (bound - lower) * share) * 1000, 3), False
        lower, below = bound, count
    return round(lower * 1000, 3), True
