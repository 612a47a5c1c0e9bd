"""One `/metrics` for the workers of `--workers N`: each worker's series with a `worker` label
(its slot, 0 to N-1, kept by the worker that replaces it), and counters that carry on across
a worker's restart, so that a replaced worker's counts are neither lost nor seen as a reset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

# Families whose samples only grow (a histogram's buckets, count and sum included).
_GROWING: Final = ("counter", "histogram", "summary")

Series = tuple[str, tuple[tuple[str, str], ...]]  # sample name, sorted labels (no worker)


def parse(text: str) -> list[Metric]:
    """A worker's exposition, its `_created` samples left out: a worker that replaces
    another continues its counters, so their creation time means nothing here."""
    families = list(text_string_to_metric_families(text))
    for family in families:
        family.samples = [s for s in family.samples if not s.name.endswith("_created")]
    return families


class WorkerMetrics:
    """The latest exposition of each worker slot, and what the slot's earlier workers had
    counted when they exited."""

    def __init__(self) -> None:
        self.latest: dict[int, list[Metric]] = {}
        self.carried: dict[int, dict[Series, float]] = {}
        self.kinds: dict[str, tuple[str, str]] = {}  # family name -> (type, help)

    def update(self, slot: int, families: list[Metric]) -> None:
        self.latest[slot] = families
        for family in families:
            self.kinds[family.name] = (family.type, family.documentation)

    def retire(self, slot: int) -> None:
        """The slot's worker exited: its last counts carry on under the next one."""
        carried = self.carried.setdefault(slot, {})
        for family in self.latest.pop(slot, []):
            if family.type in _GROWING:
                for s in family.samples:
                    series = (s.name, tuple(sorted(s.labels.items())))
                    carried[series] = carried.get(series, 0.0) + s.value

    def families(self) -> Iterator[Metric]:
        """Every family, each sample labelled with its worker, counters plus what was
        carried over for the slot."""
        merged: dict[str, Metric] = {}
        for slot in sorted(set(self.latest) | set(self.carried)):
            carried = dict(self.carried.get(slot, {}))
            for family in self.latest.get(slot, []):
                out = self._family(merged, family.name)
                for s in family.samples:
                    series = (s.name, tuple(sorted(s.labels.items())))
                    value = s.value + carried.pop(series, 0.0)
                    out.add_sample(s.name, {**s.labels, "worker": str(slot)}, value)
            for (name, labels), value in carried.items():  # series the new one has not had
                family_name = self._family_of(name)
                if family_name is not None:
                    out = self._family(merged, family_name)
                    out.add_sample(name, {**dict(labels), "worker": str(slot)}, value)
        yield from merged.values()

    def _family(self, merged: dict[str, Metric], name: str) -> Metric:
        if name not in merged:
            kind, documentation = self.kinds[name]
            merged[name] = Metric(name, documentation, kind)
        return merged[name]

    def _family_of(self, sample: str) -> str | None:
        for suffix in ("", "_total", "_bucket", "_count", "_sum"):
            if suffix and not sample.endswith(suffix):
                continue
            name = sample[: len(sample) - len(suffix)] if suffix else sample
            if name in self.kinds:
                return name
        return None


def one_each(*groups: Iterable[Metric]) -> Iterator[Metric]:
    """The families of `groups`, those of one name made one (its HELP and TYPE said once):
    a strict parser refuses a family said twice, as the workers' `listener="listen"` and the
    supervisor's `listener="admin"` certificate expiry would be."""
    merged: dict[str, Metric] = {}
    for group in groups:
        for family in group:
            kept = merged.get(family.name)
            if kept is None:
                merged[family.name] = family
            else:
                kept.samples.extend(family.samples)
    yield from merged.values()
