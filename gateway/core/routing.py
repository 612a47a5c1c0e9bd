"""Which route a request falls under: the longest prefix that any reading of its path matches."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from gateway.core.paths import readings


class Prefixed(Protocol):
    @property
    def path_prefix(self) -> str: ...


R = TypeVar("R", bound=Prefixed)


def under(prefix: str, path: str) -> bool:
    """Whether a lower-case `path` is `prefix` or below it."""
    prefix = prefix.rstrip("/").lower()
    return path == prefix or path.startswith(prefix + "/") or prefix == ""


def route_for(routes: Iterable[R], path: str, raw: str = "") -> R | None:
    """The route with the longest prefix that any reading of `path` (decoded; `raw`: as sent)
    falls under (`paths.readings`: `/public/../pay` and `/PAY` are routed as `/pay`)."""
    read = readings(path, raw)
    best: R | None = None
    for route in routes:
        if any(under(route.path_prefix, reading) for reading in read) and (
            best is None or len(route.path_prefix) > len(best.path_prefix)
        ):
            best = route
    return best
