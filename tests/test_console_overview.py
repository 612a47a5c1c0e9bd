"""The console's overview document: every configured route listed before it has traffic,
with its mode; every kind of traffic counted; upstream time and overhead apart, and a p99
past the last bucket said to be past it."""

from __future__ import annotations

from gateway.ops.overview import OUTCOMES, overview
from gateway.telemetry import metrics as m
from gateway.telemetry.metrics import Metrics

WORKER = {"worker": 0, "pid": 1, "up": True, "ready": True, "redis": True}


def test_routes_are_listed_with_their_mode_before_any_traffic() -> None:
    metrics = Metrics()
    metrics.watch_routes(lambda: [("api", "enforce", "closed"), ("trial", "shadow", "open")])
    document = overview(metrics.registry.collect(), [WORKER])
    assert list(document["routes"]) == ["api", "trial"]
    trial = document["routes"]["trial"]
    assert (trial["mode"], trial["fail_mode"]) == ("shadow", "open")
    assert set(trial["counts"].values()) == {0.0}


def test_every_kind_of_traffic_is_counted_on_its_route() -> None:
    metrics = Metrics()
    for outcome in OUTCOMES:
        metrics.request("api", "POST", outcome)
    counts = overview(metrics.registry.collect(), [WORKER])["routes"]["api"]["counts"]
    assert counts == dict.fromkeys(OUTCOMES, 1.0)
    assert {m.BYPASSED, m.SHADOWED, m.UNPROTECTED} <= set(counts)


def test_upstream_time_and_overhead_apart_and_a_p99_past_the_buckets() -> None:
    metrics = Metrics()
    metrics.upstream("api", 2.0)  # a timed-out call: the upstream's 2 s
    metrics.overhead("api", 0.0004)
    entry = overview(metrics.registry.collect(), [WORKER])["routes"]["api"]
    assert 1000 < entry["upstream_p99_ms"] <= 2500 and entry["upstream_p99_beyond"] is False
    assert entry["overhead_p99_ms"] < 1 and entry["overhead_p99_beyond"] is False
    metrics.overhead("api", 3.0)
    metrics.overhead("api", 3.0)
    entry = overview(metrics.registry.collect(), [WORKER])["routes"]["api"]
    assert (entry["overhead_p99_ms"], entry["overhead_p99_beyond"]) == (1000.0, True)
