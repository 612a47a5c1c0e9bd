"""The console's history, as the admin process keeps it: points of answers, errors and
bypassed requests per second and the overhead's p99, from the change of the metrics it
serves between two points, over a bounded span."""

from __future__ import annotations

from gateway.ops.history import History
from gateway.telemetry import metrics as m
from gateway.telemetry.metrics import Metrics


def test_a_point_holds_the_rates_since_the_one_before() -> None:
    metrics = Metrics()
    history = History(every=10, span=60)
    history.add(1000.0, metrics.registry.collect())  # the baseline: no point yet
    assert history.document()["points"] == []
    for _ in range(30):
        metrics.request("api", "POST", m.FORWARDED)
        metrics.overhead("api", 0.002)
    for _ in range(10):
        metrics.request("api", "POST", m.ERROR)
        metrics.overhead("api", 0.002)
    for _ in range(5):
        metrics.request("open", "POST", m.BYPASSED)
        metrics.overhead("open", 0.5)
    history.add(1010.0, metrics.registry.collect())
    (point,) = history.document()["points"]
    assert point["time"] == 1010.0
    assert (point["answers"], point["errors"], point["bypassed"]) == (4.5, 1.0, 0.5)
    assert 250 <= point["overhead_p99_ms"] <= 1000 and point["overhead_p99_beyond"] is False
    history.add(1020.0, metrics.registry.collect())  # nothing since: zeros, no p99
    last = history.document()["points"][-1]
    assert (last["answers"], last["errors"], last["overhead_p99_ms"]) == (0.0, 0.0, None)


def test_it_keeps_only_its_span() -> None:
    metrics = Metrics()
    history = History(every=10, span=60)
    for n in range(20):
        metrics.request("api", "POST", m.FORWARDED)
        history.add(1000.0 + 10 * n, metrics.registry.collect())
    points = history.document()["points"]
    assert len(points) == 6
    assert points[0]["time"] == 1140.0 and points[-1]["time"] == 1190.0
    assert all(point["answers"] == 0.1 for point in points)


def test_an_overhead_past_the_last_bucket_is_said_so() -> None:
    metrics = Metrics()
    history = History()
    history.add(0.0, metrics.registry.collect())
    metrics.overhead("api", 2.0)  # a 2 s overhead: past the 1 s bucket
    history.add(10.0, metrics.registry.collect())
    (point,) = history.document()["points"]
    assert point["overhead_p99_ms"] == 1000.0 and point["overhead_p99_beyond"] is True
